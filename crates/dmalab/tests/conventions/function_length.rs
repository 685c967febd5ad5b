//! Issue 30: no function in the libraries or the binary runs over
//! [`LIMIT`] lines. A long function hides its steps; split it where a
//! name explains the piece. The scan is a brace counter over the sources
//! with strings, characters and comments blanked out, which is all that
//! Rust's syntax needs to find where a `fn` body ends.

use std::path::{Path, PathBuf};

/// The most lines a function may take, from its `fn` line to its closing
/// brace, both counted.
const LIMIT: usize = 150;

/// Functions still over [`LIMIT`] while someone splits them: (path under
/// `crates/`, function name). An entry that is no longer long fails the
/// test too, so that the list cannot go stale.
const ALLOWED: &[(&str, &str)] = &[];

/// One `fn` found in a source file.
#[derive(Debug, PartialEq)]
struct Function {
    name: String,
    /// The line of its `fn` keyword, from 1.
    line: usize,
    /// Lines from the `fn` line to the closing brace, both counted.
    lines: usize,
}

/// `src` with every comment, string and character literal replaced by
/// spaces (newlines kept, so that line numbers still hold). Lifetimes
/// (`'a`) are code and stay.
fn blank_literals(src: &str) -> Vec<char> {
    let s: Vec<char> = src.chars().collect();
    let mut out = s.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < s.len() {
        let at = |k: usize| s.get(i + k).copied().unwrap_or('\0');
        let after_ident = i > 0 && ident(s[i - 1]);
        if at(0) == '/' && at(1) == '/' {
            let end = s[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(s.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if at(0) == '/' && at(1) == '*' {
            // Block comments nest in Rust.
            let (mut j, mut depth) = (i + 2, 1);
            while j < s.len() && depth > 0 {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !after_ident && (at(0) == 'r' || (at(0) == 'b' && at(1) == 'r')) && {
            let r = if at(0) == 'r' { 1 } else { 2 };
            let hashes = s[i + r..].iter().take_while(|&&c| c == '#').count();
            s.get(i + r + hashes) == Some(&'"')
        } {
            // A raw string: no escapes; it ends at a quote followed by as
            // many hashes as opened it.
            let r = if at(0) == 'r' { 1 } else { 2 };
            let hashes = s[i + r..].iter().take_while(|&&c| c == '#').count();
            let mut j = i + r + hashes + 1;
            while j < s.len() {
                if s[j] == '"'
                    && s[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&c| c == '#')
                        .count()
                        == hashes
                {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if at(0) == '"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != '"' {
                j += if s[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if at(0) == '\'' {
            // A character ('x', '\n', '\u{7b}') or a lifetime ('a, 'static).
            let end = if at(1) == '\\' {
                // The escaped character may itself be a quote: `'\''`.
                s[i + 3..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map(|p| i + 3 + p)
            } else if at(2) == '\'' {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end + 1);
                    i = end + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// What one source file holds.
#[derive(Debug, Default)]
struct Scan {
    /// Every `fn` with a body, outside `#[cfg(test)] mod NAME { … }`
    /// blocks (their functions are tests).
    functions: Vec<Function>,
    /// The modules declared `#[cfg(test)] mod NAME;`: their files are
    /// tests too.
    test_modules: Vec<String>,
}

fn scan(src: &str) -> Scan {
    let code = blank_literals(src);
    // The index of the first character of each line.
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            code.iter()
                .enumerate()
                .filter(|(_, &c)| c == '\n')
                .map(|(i, _)| i + 1),
        )
        .collect();
    let line_of = |i: usize| starts.partition_point(|&s| s <= i);
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let word_at = |i: usize, w: &str| {
        let w: Vec<char> = w.chars().collect();
        code[i..].starts_with(&w)
            && (i == 0 || !ident(code[i - 1]))
            && !code.get(i + w.len()).is_some_and(|&c| ident(c))
    };
    let skip_space = |mut i: usize| {
        while i < code.len() && code[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let read_ident = |i: usize| {
        let end = code[i..]
            .iter()
            .position(|&c| !ident(c))
            .map_or(code.len(), |p| i + p);
        (code[i..end].iter().collect::<String>(), end)
    };
    // The index just past the brace that closes the one at `open`.
    let close = |open: usize| {
        let mut depth = 0usize;
        for (j, &c) in code.iter().enumerate().skip(open) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return j + 1;
                    }
                }
                _ => {}
            }
        }
        code.len()
    };
    let mut found = Scan::default();
    let mut i = 0;
    while i < code.len() {
        if code[i] != '#' && code[i] != 'f' {
            i += 1;
        } else if code[i..].starts_with(&['#', '[']) {
            // `#[cfg(test)]`, then maybe more attributes, then `mod NAME {`.
            let attr: String = code[i..].iter().take_while(|&&c| c != ']').collect();
            let attr: String = attr.chars().filter(|c| !c.is_whitespace()).collect();
            if attr == "#[cfg(test)" {
                let mut j = i;
                loop {
                    j = skip_space(j);
                    if code[j..].starts_with(&['#', '[']) {
                        j += code[j..]
                            .iter()
                            .position(|&c| c == ']')
                            .map_or(0, |p| p + 1);
                    } else {
                        break;
                    }
                }
                if word_at(j, "pub") {
                    j = skip_space(j + 3);
                }
                if word_at(j, "mod") {
                    let (name, end) = read_ident(skip_space(j + 3));
                    let k = skip_space(end);
                    match code.get(k) {
                        Some('{') => {
                            i = close(k);
                            continue;
                        }
                        Some(';') => found.test_modules.push(name),
                        _ => {}
                    }
                }
            }
            i += 2;
        } else if word_at(i, "fn") {
            let (name, end) = read_ident(skip_space(i + 2));
            // `fn(u8) -> u8` is a type, not a function.
            if name.is_empty() {
                i += 2;
                continue;
            }
            // The body opens at the first `{` outside the signature's
            // parentheses and angle brackets; a `;` first means no body.
            let mut j = end;
            let mut parens = 0i32;
            let mut body = None;
            while j < code.len() {
                match code[j] {
                    '(' | '[' => parens += 1,
                    ')' | ']' => parens -= 1,
                    ';' if parens == 0 => break,
                    '{' if parens == 0 => {
                        body = Some(j);
                        break;
                    }
                    _ => {}
                }
                j += 1;
            }
            if let Some(open) = body {
                let line = line_of(i);
                let last = line_of(close(open) - 1);
                found.functions.push(Function {
                    name,
                    line,
                    lines: last - line + 1,
                });
            }
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

/// The workspace's `crates/` folder.
fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The file that holds module `name` declared in `parent`
/// (`a/mod.rs` or `a/lib.rs` declares `a/name.rs`; `a/b.rs` declares
/// `a/b/name.rs`), either as `name.rs` or `name/mod.rs`.
fn module_files(parent: &Path, name: &str) -> [PathBuf; 2] {
    let dir = parent.parent().unwrap_or(Path::new(""));
    let stem = parent.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let dir = if ["mod", "lib", "main"].contains(&stem) {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
}

/// Every function of `crates/*/src/**/*.rs` outside the tests, as
/// (path under `crates/`, function).
fn workspace_functions() -> Vec<(String, Function)> {
    let crates = crates_dir();
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in &dirs {
        rust_files(dir, &mut files);
    }
    assert!(
        files.len() > 100,
        "found only {} sources under {}",
        files.len(),
        crates.display()
    );
    let mut scans = Vec::new();
    let mut test_files = Vec::new();
    for path in files {
        let src = std::fs::read_to_string(&path).unwrap();
        let scan = scan(&src);
        for name in &scan.test_modules {
            test_files.extend(module_files(&path, name));
        }
        scans.push((path, scan));
    }
    let mut all = Vec::new();
    for (path, scan) in scans {
        if test_files.contains(&path) {
            continue;
        }
        let rel = path
            .strip_prefix(&crates)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        all.extend(scan.functions.into_iter().map(|f| (rel.clone(), f)));
    }
    all
}

#[test]
fn no_function_runs_over_150_lines() {
    let all = workspace_functions();
    let long: Vec<&(String, Function)> = all.iter().filter(|(_, f)| f.lines > LIMIT).collect();
    let mut wrong = Vec::new();
    for (path, f) in &long {
        if !ALLOWED.contains(&(path.as_str(), f.name.as_str())) {
            wrong.push(format!(
                "crates/{path}:{}:{} lines (from line {}): split it where a name explains the piece",
                f.name, f.lines, f.line
            ));
        }
    }
    for (path, name) in ALLOWED {
        if !long.iter().any(|(p, f)| p == path && f.name == *name) {
            wrong.push(format!(
                "crates/{path}:{name}: allowed to be long but is not (or is gone): take it off ALLOWED"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "functions over {LIMIT} lines:\n{}",
        wrong.join("\n")
    );
}

/// The scanner itself, on a fixture whose braces hide in every place that
/// is not code.
#[test]
fn the_function_scanner_counts_only_code_braces() {
    let fixture = r####"
fn one_line() {}
fn strings() -> &'static str {
    let _ = "}}} \" }";
    let _ = r#"}" }"#;
    let _ = br##"}"# }"##;
    let _ = ('{', '}', '\'', '\u{7d}', b'}');
    // }}}
    /* } /* nested } */ } */
    "done"
}
fn lifetimes<'a, T: Fn(u8) -> u8>(x: &'a str, f: fn(u8) -> u8) -> [u8; 2]
where
    T: Copy,
{
    let v = [0u8; 2];
    v
}
trait Declared {
    fn no_body(&self);
    fn with_body(&self) {
        let _ = 1;
    }
}
#[cfg(test)]
mod tests {
    fn hidden() {
    }
}
#[cfg(test)]
#[path = "elsewhere.rs"]
mod other;
fn last() {
}
"####;
    let found = scan(fixture);
    let got: Vec<(&str, usize, usize)> = found
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.line, f.lines))
        .collect();
    assert_eq!(
        got,
        [
            ("one_line", 2, 1),
            ("strings", 3, 9),
            ("lifetimes", 12, 7),
            ("with_body", 21, 3),
            ("last", 33, 2),
        ]
    );
    assert_eq!(found.test_modules, ["other"]);
}

#[test]
fn a_module_file_is_found_beside_its_parent() {
    let [a, b] = module_files(Path::new("x/src/ledger/mod.rs"), "tests");
    assert_eq!(
        (a.as_path(), b.as_path()),
        (
            Path::new("x/src/ledger/tests.rs"),
            Path::new("x/src/ledger/tests/mod.rs")
        )
    );
    let [a, _] = module_files(Path::new("x/src/runner.rs"), "tests");
    assert_eq!(a, Path::new("x/src/runner/tests.rs"));
}
