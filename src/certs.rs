//! X.509: fingerprints, validity, chain and key checks.
