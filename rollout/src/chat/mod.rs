//! Chat format: tokenizer and chat template (filled in by the chat work).
