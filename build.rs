//! Link-time settings of the `lance-gateway` binary.
//!
//! The lance crates give the binary about 360 000 pointers to its own code and constant data
//! (vtables, string tables, function tables), 6.4 MB of `.data.rel.ro` in all.
//!
//! - **Not position-independent.** In a position-independent executable (PIE, rustc's default)
//!   the kernel places the binary at a random address, so the dynamic loader must patch every
//!   one of those pointers at start. Each patched page becomes a private copy: 6.4 MB of
//!   anonymous memory, nine tenths of an idle gateway's, most of it never read again. Linked
//!   at a fixed address (`-no-pie`), the pointers are final in the file, and the kernel maps
//!   in only the pages a request reads, from the page cache, shared between replicas. What is
//!   given up is address-space randomisation of the binary's own image (the heap, the stacks,
//!   memory maps and shared libraries are still randomised), the same trade Go makes by
//!   default for its linux/amd64 binaries, SeaweedFS's among them. Objects are still compiled
//!   position-independent, so a build that wants a PIE back drops this one argument.
//! - **Packed relative relocations** (`-z pack-relative-relocs`: binutils 2.38 and glibc 2.36,
//!   both in Debian bookworm, the image's base) for such a PIE build: written as classic
//!   `RELA` entries the relocations fill 8.7 MB that the loader reads in whole; as `RELR`, a
//!   few hundred kilobytes. A fixed-address binary has none, so there it changes nothing.
//! - **The code a catalog runs, packed together.** Of the binary's 181 MB of code, a gateway
//!   that starts and serves catalog requests on a local warehouse or S3 runs about 4 800
//!   functions, 4 MB. Where the compiler leaves them they are spread over all of it, and the
//!   kernel maps code in 64 KiB around each page first run, so an idle gateway held 15 MiB
//!   of code resident. `link/hot-functions.txt` (written by `scripts/hot-functions`, which
//!   records them under valgrind) has the linker (LLD, rustc's default on x86_64 Linux) put
//!   those functions first, side by side. A name the binary no longer has (symbol names
//!   carry a hash of their crate's build, so dependency updates rename them) is skipped
//!   without a warning: a stale file costs memory, never the build. The gateway's own crate
//!   is one codegen unit (Cargo.toml), so editing it renames only the functions it changes.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
        // The checkout this build runs in, read when the script runs: checkouts that share a
        // target folder can share this script's compiled binary, and a path compiled into it
        // would name the checkout that compiled it, which may be gone.
        let root = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        let order = std::path::Path::new(&root).join("link/hot-functions.txt");
        if order.exists() {
            // The linker reads a copy in the build's own folder: checkouts that share a target
            // folder share this script's output too, and a path into one checkout would
            // dangle once it is gone.
            let copy = std::path::Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
                .join("hot-functions.txt");
            std::fs::copy(&order, &copy).expect("link/hot-functions.txt is copied to OUT_DIR");
            println!(
                "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
                copy.display()
            );
            println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
        }
        println!("cargo:rerun-if-changed=link/hot-functions.txt");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
