//! RESP commands (GET/SET) and reply framing.
