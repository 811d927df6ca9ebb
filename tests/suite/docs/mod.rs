//! The documentation kept true: relative links, and the layering of docs/ARCHITECTURE.md.

mod clone_reads;
mod doc_links;
mod errors;
mod layering;
mod promises;
mod size;
