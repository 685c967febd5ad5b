//! Slurm host lists: `node[01-04,07],gpu1` expanded into node names, in
//! the order written (duplicates kept: the caller decides about them).

/// The most nodes a host list may name (bracket groups multiply, so the
/// bound is checked as names are made, before they are all in memory).
pub const MAX_NODES: usize = 100_000;

fn too_many(list: &str) -> String {
    format!("'{list}' names more than {MAX_NODES} nodes")
}

/// Expands a host list. The error says what is wrong with it.
pub fn expand(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in split_top(list)? {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!(
                "'{list}' has an empty entry (two commas, or one at an end)"
            ));
        }
        out.extend(expand_one(item)?);
        if out.len() > MAX_NODES {
            return Err(too_many(list));
        }
    }
    if out.is_empty() {
        return Err("the list is empty".into());
    }
    Ok(out)
}

/// Splits at commas outside brackets.
fn split_top(list: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("'{list}': brackets do not match"));
        }
    }
    if depth != 0 {
        return Err(format!("'{list}': brackets do not match"));
    }
    parts.push(&list[start..]);
    Ok(parts)
}

/// One entry: text with any number of `[ranges]` groups.
fn expand_one(item: &str) -> Result<Vec<String>, String> {
    let Some(open) = item.find('[') else {
        check_name(item)?;
        return Ok(vec![item.to_string()]);
    };
    let close = item[open..]
        .find(']')
        .map(|i| open + i)
        .ok_or_else(|| format!("'{item}': '[' without ']'"))?;
    let prefix = &item[..open];
    let rest = expand_one_tail(&item[close + 1..])?;
    let mut out = Vec::new();
    for n in ranges(item, &item[open + 1..close])? {
        if out.len().saturating_add(rest.len()) > MAX_NODES {
            return Err(too_many(item));
        }
        for r in &rest {
            let name = format!("{prefix}{n}{r}");
            check_name(&name)?;
            out.push(name);
        }
    }
    Ok(out)
}

fn expand_one_tail(tail: &str) -> Result<Vec<String>, String> {
    if tail.is_empty() {
        return Ok(vec![String::new()]);
    }
    if tail.contains('[') {
        return expand_one(tail);
    }
    Ok(vec![tail.to_string()])
}

/// `01-04,07` -> `01 02 03 04 07` (the width of the lower bound is kept).
fn ranges(item: &str, body: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for r in body.split(',') {
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        let bad = || format!("'{item}': '{r}' is not a number or a range such as 01-04");
        if lo.is_empty() || !lo.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if hi.is_empty() || !hi.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| bad())?,
            hi.parse().map_err(|_| bad())?,
        );
        if b < a {
            return Err(format!("'{item}': range '{r}' runs backwards"));
        }
        if b - a >= 100_000 {
            return Err(format!(
                "'{item}': range '{r}' names more than 100000 nodes"
            ));
        }
        let width = lo.len();
        for n in a..=b {
            out.push(format!("{n:0width$}"));
        }
    }
    Ok(out)
}

/// A node name must be usable as a file name and in a shell script.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.starts_with(['.', '-'])
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(format!(
            "'{name}' is not a node name (letters, digits, '.', '_' and '-' only)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn bracket_groups_that_multiply_past_the_bound_are_refused() {
        let e = expand("n[0-99999][0-99999]").unwrap_err();
        assert!(e.contains("more than 100000 nodes"), "{e}");
        let e = expand("a[0-60000],b[0-60000]").unwrap_err();
        assert!(e.contains("more than 100000 nodes"), "{e}");
        assert_eq!(expand("n[0-1][0-1]").unwrap(), ["n00", "n01", "n10", "n11"]);
    }

    #[test]
    fn ranges_keep_their_width_and_order() {
        assert!(expand("n[01-03,10],gpu1,r[1-2]x[a]")
            .unwrap_err()
            .contains("'a' is not a number or a range such as 01-04"));
        assert_eq!(
            expand("n[08-10],gpu1").unwrap(),
            ["n08", "n09", "n10", "gpu1"]
        );
        assert_eq!(
            expand("r[1-2]c[1,3]").unwrap(),
            ["r1c1", "r1c3", "r2c1", "r2c3"]
        );
        assert_eq!(expand("vm,vm").unwrap(), ["vm", "vm"]);
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        assert!(expand("n[1-3").unwrap_err().contains("brackets"));
        assert!(expand("n[3-1]").unwrap_err().contains("backwards"));
        assert!(expand("a,,b").unwrap_err().contains("empty entry"));
        assert!(expand("a b").unwrap_err().contains("not a node name"));
        assert!(expand("../x").unwrap_err().contains("not a node name"));
    }
}
