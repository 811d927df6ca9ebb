//! seal: Sealed Secrets through the binary, the upstream vectors, and which sealing
//! certificate is trusted.

mod seal_cli;
mod seal_vectors;
mod sealing_trust;
