//! The command line itself (completions, man page, help, progress) and the demo.

mod add;
mod commands;
mod demo;
mod drop_issuer;
