//! Kubeconfigs: parse, sanitize, rewrite, serialize.
