//! The command line itself (completions, man page, help, progress) and the demo.

mod commands;
mod demo;
