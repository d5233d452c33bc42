//! The command builder every poll step uses: a leaf module, so `commands`,
//! `histogram` and the presets can all build commands without importing one
//! another.

/// A command with one key argument, with room for the few arguments a
/// poll adds (growing two vectors per command was a visible share of a
/// poll's allocator time).
pub fn cmd(name: &str, key: &[u8]) -> redis::Cmd {
    let mut c = redis::Cmd::with_capacity(10, name.len() + key.len() + 64);
    c.arg(name).arg(key);
    c
}
