//! The binary's hot code is packed by `link/hot-functions.txt` (see `build.rs`). Symbol names
//! carry a hash of their crate's build, so a dependency update renames many of them; the
//! linker then skips the names it no longer finds, without a word, and an idle gateway holds
//! 10 MiB more code resident. This fails first, with the command that writes the file anew.

use std::collections::HashSet;
use std::process::Command;

#[test]
fn the_hot_function_list_names_the_binarys_own_functions() {
    let list = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/link/hot-functions.txt"
    ))
    .expect("link/hot-functions.txt is readable");
    let wanted: Vec<&str> = list.lines().filter(|l| !l.is_empty()).collect();
    assert!(
        wanted.len() > 1000,
        "link/hot-functions.txt names {} functions",
        wanted.len()
    );
    let nm = Command::new("nm")
        .args(["--defined-only", env!("CARGO_BIN_EXE_lance-gateway")])
        .output()
        .expect("nm (binutils) runs");
    assert!(nm.status.success(), "nm failed: {nm:?}");
    let defined: HashSet<&str> = std::str::from_utf8(&nm.stdout)
        .expect("nm prints text")
        .lines()
        .filter_map(|line| line.rsplit(' ').next())
        .collect();
    let missing: Vec<&&str> = wanted.iter().filter(|n| !defined.contains(**n)).collect();
    // A change of the gateway's own code renames some (its closures and the generics it
    // instantiates): the batch declares of 2a6bc96 renamed 600 of these 4 815. Most of the
    // list is the dependencies' code, so a quarter gone means they moved under the file.
    assert!(
        missing.len() * 4 < wanted.len(),
        "{} of the {} functions in link/hot-functions.txt are not in the binary (first: {:?}); \
         run scripts/hot-functions (with SeaweedFS, as scripts/test-all starts it) and commit the file",
        missing.len(),
        wanted.len(),
        missing.first()
    );
}
