//! The version every daemon reports (`-version`, `/info`, `/stats`, IDENTIFY to lookupd).

/// The NSQ release we are compatible with.
pub const VERSION: &str = "1.3.0";

/// `<app> v1.3.0 (built w/rustc1.95.0)`: the reference prints its Go version where we print
/// the compiler's (recorded by this crate's `build.rs`).
pub fn version_string(app: &str) -> String {
    let rustc = option_env!("NSQ_RUSTC_VERSION").unwrap_or("1.95.0");
    format!("{app} v{VERSION} (built w/rustc{rustc})")
}
