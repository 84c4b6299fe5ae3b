"""secemb: privacy-preserving federated recommendation with sparse embeddings.

Two non-colluding servers hold the public item embeddings.  Users privately retrieve the rows
they need through DPF-based PIR and upload row-sparse gradients that the servers aggregate
securely (SecEmb).  The hazmat layer (:mod:`secemb.fss`, :mod:`secemb.ring`,
:mod:`secemb.sharing`) sits below the protocols (:mod:`secemb.protocols`) and the ``secemb``
command line.  Importing this package is cheap: it does not import torch.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
