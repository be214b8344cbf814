//! Length-prefixed messenger frames.
