"""The golden set: frozen, versioned cases, their validation, the formats they come in and go out in, and their growth."""
