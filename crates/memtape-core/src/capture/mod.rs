//! The capture file (`.mtape`): record encoding, the streaming writer and the reader.
//! Format: docs/capture-format.md.
