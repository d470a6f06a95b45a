//! Where the golden tests find the Linux rxe captures.

use std::path::PathBuf;

/// The capture set: `tests/vectors/` of this crate (the captures, their `.txt` notes, the
/// README whose table the tests check, and the independent ICRC checker), or the directory
/// in `$DROCE_VECTORS`, to run the same tests against another copy of that set.
pub fn vectors_dir() -> PathBuf {
    let d = match std::env::var_os("DROCE_VECTORS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors"),
    };
    assert!(
        d.join("README.md").is_file(),
        "golden vectors not found at {} (no README.md there; check $DROCE_VECTORS)",
        d.display()
    );
    d
}
