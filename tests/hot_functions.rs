//! The binary's hot code is packed by `link/hot-functions.txt` (see `build.rs`). Symbol names
//! carry a hash of their crate's build, so a dependency update renames many of them; the
//! linker then skips the names it no longer finds, without a word, and an idle gateway holds
//! more code resident (8% of the list missing cost 4.4 of 13.7 MiB peak). This fails once a
//! twentieth is missing, with the command that writes the file anew.
//! And a build that did not hand the file to the linker at all (build.rs once looked for it in
//! the checkout that compiled the script, gone when the target folder is shared) fails too.

use std::collections::HashSet;
use std::process::Command;

fn hot_list() -> Vec<String> {
    let list = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/link/hot-functions.txt"
    ))
    .expect("link/hot-functions.txt is readable");
    let wanted: Vec<String> = list
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    assert!(
        wanted.len() > 1000,
        "link/hot-functions.txt names {} functions",
        wanted.len()
    );
    wanted
}

/// The binary's defined symbols as `nm -n` prints them: (address, type, name), by address.
fn symbols() -> Vec<(u64, char, String)> {
    let nm = Command::new("nm")
        .args(["-n", "--defined-only", env!("CARGO_BIN_EXE_lance-gateway")])
        .output()
        .expect("nm (binutils) runs");
    assert!(nm.status.success(), "nm failed: {nm:?}");
    std::str::from_utf8(&nm.stdout)
        .expect("nm prints text")
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let address = u64::from_str_radix(parts.next()?, 16).ok()?;
            let kind = parts.next()?.chars().next()?;
            Some((address, kind, parts.next()?.to_string()))
        })
        .collect()
}

#[test]
fn the_hot_function_list_names_the_binarys_own_functions() {
    let wanted = hot_list();
    let symbols = symbols();
    let defined: HashSet<&str> = symbols.iter().map(|(_, _, n)| n.as_str()).collect();
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|n| !defined.contains(n.as_str()))
        .collect();
    // The gateway's crate is one codegen unit (Cargo.toml), so an edit renames only what it
    // changes (reverting cad8cb9's one-call edit renamed none of 4 346; with the default
    // units, thin local LTO's `.llvm.<hash>` suffixes renamed 394, and the 8% of the list
    // left unpacked cost a third of peak RSS). A dependency or toolchain update renames many.
    assert!(
        missing.len() * 20 < wanted.len(),
        "{} of the {} functions in link/hot-functions.txt are not in the binary (first: {:?}); \
         run scripts/hot-functions (with SeaweedFS, as scripts/test-all starts it) and commit the file",
        missing.len(),
        wanted.len(),
        missing.first()
    );
}

#[test]
fn the_listed_functions_sit_at_the_front_of_the_code() {
    let wanted: HashSet<String> = hot_list().into_iter().collect();
    let symbols = symbols();
    let code: Vec<(u64, &str)> = symbols
        .iter()
        .filter(|(_, kind, _)| matches!(kind, 't' | 'T'))
        .map(|(address, _, name)| (*address, name.as_str()))
        .collect();
    let start = code.first().expect("the binary has code").0;
    let listed: Vec<u64> = code
        .iter()
        .filter(|(_, name)| wanted.contains(*name))
        .map(|(address, _)| address - start)
        .collect();
    // The list is about 4 MB of code in a binary of 180 MB; packed, nearly all of it lies in
    // the first 16 MiB, and left where the compiler puts it, about one in ten would.
    let front = listed.iter().filter(|&&at| at < 16 << 20).count();
    assert!(
        front * 10 >= listed.len() * 9,
        "only {front} of the {} listed functions the binary has lie in the first 16 MiB of its \
         code: the linker was not given link/hot-functions.txt (see build.rs)",
        listed.len()
    );
}
