"""SecEA: secure embedding aggregation with Lagrange-coded shares and Paillier (secea.txt)."""
