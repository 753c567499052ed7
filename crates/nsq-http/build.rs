//! Records the compiler version for `<daemon> -version` (`nsqd v1.3.0 (built w/rustc1.95.0)`), the
//! counterpart of the Go version the reference prints.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        // "rustc 1.95.0 (59807616e 2026-04-14)" → "1.95.0"
        .and_then(|s| s.split_whitespace().nth(1).map(str::to_string));
    if let Some(v) = version {
        println!("cargo:rustc-env=NSQ_RUSTC_VERSION={v}");
    }
}
