//! User text made safe for one terminal line.
//!
//! Errors and progress lines echo what the user typed or what an input file
//! holds (an experiment name, a matrix value, a file name). A newline in it
//! would break the one-line message, and an escape sequence would reach the
//! terminal raw; [`shown`] writes such characters as escapes instead.

/// The longest user value echoed whole; a longer one is cut, with a count
/// of what was left out, so a megabyte-long value gives a readable line.
pub const SHOWN_MAX_CHARS: usize = 200;

/// `s` with control characters (newline, escape, ...) and Unicode direction
/// overrides written as Rust-style escapes (`\n`, `\u{1b}`), cut after
/// [`SHOWN_MAX_CHARS`] characters.
pub fn shown(s: &str) -> String {
    let mut out = escaped(s);
    let n = out.chars().count();
    if n > SHOWN_MAX_CHARS {
        out = out.chars().take(SHOWN_MAX_CHARS).collect();
        out.push_str(&format!("... ({} more characters)", n - SHOWN_MAX_CHARS));
    }
    out
}

/// `s` with control characters and direction overrides escaped, not cut:
/// for a whole message line that is already bounded.
pub fn escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Control characters and the invisible characters that reorder or hide
/// text on a terminal (bidirectional overrides and isolates).
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(shown("a\nb"), "a\\nb");
        assert_eq!(shown("x\u{1b}[2Jy"), "x\\u{1b}[2Jy");
        assert_eq!(shown("r\u{202e}l"), "r\\u{202e}l");
        assert_eq!(shown("plain é ok"), "plain é ok");
        let long = "x".repeat(1000);
        let s = shown(&long);
        assert!(s.ends_with("... (800 more characters)"), "{s}");
    }
}
