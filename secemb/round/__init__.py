"""What every party of a round shares, below the protocols' parties (DESIGN §2: ``round/``):
today the policy constants (:mod:`secemb.round.policy`: the floor on the users of an
aggregate), which the device SDK, the server's configuration and the simulation all check.
Importing this package is cheap: it imports nothing."""
