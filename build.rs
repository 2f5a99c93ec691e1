//! Link-time settings of the `lance-gateway` binary.
//!
//! The binary is position-independent (PIE, so the kernel places it at a random address),
//! and the lance crates give it about 360 000 relative relocations that the dynamic loader
//! applies at start. Written as classic `RELA` entries they fill 8.7 MB, which the loader
//! reads in whole and keeps resident: a third of an idle gateway's memory. Packed as `RELR`
//! (`-z pack-relative-relocs`: binutils 2.38 and glibc 2.36, both in Debian bookworm, the
//! image's base) the same relocations take a few hundred kilobytes, with nothing given up.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
