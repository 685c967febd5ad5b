//! The x axis of a sweep: what its values are as numbers, and how the
//! report places them.
//!
//! A sweep value is a number (`2`, `0.5`), a size with a suffix (`"4K"`,
//! `"1M"`, `"64KiB"`: the binary sizes every dmalab flag takes), or a name
//! (`"random"`, `"50%"`). Numbers and sizes go on a numeric axis, in the
//! order of their values (not of their text, nor of the file); names go on
//! a category axis in the file's order. A list that mixes the two kinds has
//! no axis: the experiment file is refused (see [`SweepAxis::of`]).

use dmalab_core::units::parse_size;

/// How a sweep's values are drawn along x.
#[derive(Clone, Debug, PartialEq)]
pub enum SweepAxis {
    /// Numbers on a linear axis (e.g. 2 to 12 queue pairs).
    Linear,
    /// Positive numbers spanning a factor of 16 or more, on a log2 axis
    /// (workers 1, 2, 4, ... 32), ticks as numbers.
    Log2,
    /// Sizes (at least one value has a size suffix), on a log2 axis with
    /// ticks written as sizes (`4K`, `64K`, `1M`).
    Sizes,
    /// Names, evenly spaced in the file's order, one tick each.
    Categories(Vec<String>),
}

/// Why a list of sweep values has no axis.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AxisError {
    /// Numbers or sizes mixed with names.
    #[error("'{name}' is neither a number nor a size, but '{number}' is; give every value as a number or size (drawn on a numeric axis) or every value as a name (drawn as categories)")]
    Mixed {
        /// The first name.
        name: String,
        /// The first number or size.
        number: String,
    },
    /// Two values that are the same number.
    #[error("'{a}' and '{b}' are the same value; give each value once")]
    Repeated {
        /// The first spelling.
        a: String,
        /// The second.
        b: String,
    },
}

/// A sweep value as a number: a plain number, or a size with a suffix in
/// bytes. `None` for a name.
pub fn number(text: &str) -> Option<f64> {
    let t = text.trim();
    if let Ok(v) = t.parse::<f64>() {
        return v.is_finite().then_some(v);
    }
    // A size needs its digits first: "K" alone or "inf" is a name.
    if !t.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    parse_size("sweep.values", t).ok().map(|b| b as f64)
}

/// True when the value is written as a size (a number with a suffix).
fn is_size(text: &str) -> bool {
    text.trim().parse::<f64>().is_err() && number(text).is_some()
}

impl SweepAxis {
    /// The axis of a list of values, or why there is none.
    pub fn of(values: &[String]) -> Result<SweepAxis, AxisError> {
        let nums: Vec<Option<f64>> = values.iter().map(|v| number(v)).collect();
        let first_num = values.iter().zip(&nums).find(|(_, n)| n.is_some());
        let first_name = values.iter().zip(&nums).find(|(_, n)| n.is_none());
        match (first_num, first_name) {
            (Some((number, _)), Some((name, _))) => {
                return Err(AxisError::Mixed {
                    name: name.clone(),
                    number: number.clone(),
                })
            }
            (None, _) => return Ok(SweepAxis::Categories(values.to_vec())),
            _ => {}
        }
        let xs: Vec<f64> = nums.into_iter().flatten().collect();
        for (i, a) in xs.iter().enumerate() {
            if let Some(j) = xs[i + 1..].iter().position(|b| b == a) {
                return Err(AxisError::Repeated {
                    a: values[i].clone(),
                    b: values[i + 1 + j].clone(),
                });
            }
        }
        let positive = xs.iter().all(|x| *x > 0.0);
        let (lo, hi) = xs
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), x| (l.min(*x), h.max(*x)));
        Ok(if positive && values.iter().any(|v| is_size(v)) {
            SweepAxis::Sizes
        } else if positive && hi / lo >= 16.0 {
            SweepAxis::Log2
        } else {
            SweepAxis::Linear
        })
    }

    /// The axis of a results file's values: as [`SweepAxis::of`], and
    /// categories for a list it refuses (a file written before the check).
    pub fn for_report(values: &[String]) -> SweepAxis {
        Self::of(values).unwrap_or_else(|_| SweepAxis::Categories(values.to_vec()))
    }

    /// Where a value sits on this axis (its number, or its category's
    /// index); `None` for a value the axis does not have.
    pub fn x(&self, value: &str) -> Option<f64> {
        match self {
            SweepAxis::Categories(names) => names.iter().position(|n| n == value).map(|i| i as f64),
            _ => number(value),
        }
    }

    /// The values in the order they are drawn: by value on a numeric axis,
    /// in the file's order for categories. Values without a place are left
    /// out.
    pub fn ordered<'a>(&self, values: &'a [String]) -> Vec<&'a String> {
        let mut v: Vec<(&String, f64)> = values
            .iter()
            .filter_map(|s| self.x(s).map(|x| (s, x)))
            .collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        v.into_iter().map(|p| p.0).collect()
    }

    /// True for the log2 axes.
    pub fn is_log2(&self) -> bool {
        matches!(self, SweepAxis::Log2 | SweepAxis::Sizes)
    }

    /// A tick label for a position on this axis.
    pub fn label(&self, x: f64) -> String {
        match self {
            SweepAxis::Categories(names) => {
                let i = x.round();
                if i >= 0.0 && (i as usize) < names.len() {
                    names[i as usize].clone()
                } else {
                    String::new()
                }
            }
            SweepAxis::Sizes => size_label(x),
            _ => crate::draw::tick(x),
        }
    }
}

/// A size as it is typed: the largest binary suffix that divides it
/// (`4096` -> `4K`, `1572864` -> `1536K`, `1000` -> `1000`).
pub fn size_label(bytes: f64) -> String {
    if bytes.fract() != 0.0 || bytes <= 0.0 || bytes > u64::MAX as f64 {
        return crate::draw::tick(bytes);
    }
    let b = bytes as u64;
    for (shift, s) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if b.is_multiple_of(1u64 << shift) {
            return format!("{}{s}", b >> shift);
        }
    }
    b.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn numbers_and_sizes_are_numbers_names_are_not() {
        assert_eq!(number("4"), Some(4.0));
        assert_eq!(number("0.5"), Some(0.5));
        assert_eq!(number("4K"), Some(4096.0));
        assert_eq!(number("64KiB"), Some(65536.0));
        assert_eq!(number("1M"), Some(1048576.0));
        assert_eq!(number(" 2k "), Some(2048.0));
        for name in ["random", "K", "inf", "NaN", "50%", "", "4 apples"] {
            assert_eq!(number(name), None, "{name}");
        }
    }

    #[test]
    fn the_axis_follows_the_values() {
        assert_eq!(
            SweepAxis::of(&v(&["2", "4", "6", "8", "10", "12"])),
            Ok(SweepAxis::Linear)
        );
        assert_eq!(
            SweepAxis::of(&v(&["1", "2", "4", "8", "16"])),
            Ok(SweepAxis::Log2)
        );
        assert_eq!(
            SweepAxis::of(&v(&["4K", "64K", "1M"])),
            Ok(SweepAxis::Sizes)
        );
        // One suffix makes the list sizes; a zero keeps it linear.
        assert_eq!(SweepAxis::of(&v(&["512", "4K"])), Ok(SweepAxis::Sizes));
        assert_eq!(SweepAxis::of(&v(&["0", "4K"])), Ok(SweepAxis::Linear));
        assert_eq!(
            SweepAxis::of(&v(&["single", "random"])),
            Ok(SweepAxis::Categories(v(&["single", "random"])))
        );
        let e = SweepAxis::of(&v(&["4K", "random", "1M"])).unwrap_err();
        assert_eq!(
            e,
            AxisError::Mixed {
                name: "random".into(),
                number: "4K".into()
            }
        );
        let e = SweepAxis::of(&v(&["4096", "8K", "4K"])).unwrap_err();
        assert!(
            e.to_string().contains("'4096' and '4K' are the same value"),
            "{e}"
        );
    }

    #[test]
    fn numbers_sort_by_value_names_keep_the_file_order() {
        let vals = v(&["64K", "4K", "1M", "512"]);
        let a = SweepAxis::of(&vals).unwrap();
        assert_eq!(a.ordered(&vals), ["512", "4K", "64K", "1M"]);
        let vals = v(&["10", "9", "100"]);
        let a = SweepAxis::of(&vals).unwrap();
        assert_eq!(a.ordered(&vals), ["9", "10", "100"], "not string order");
        let vals = v(&["zeta", "alpha"]);
        let a = SweepAxis::of(&vals).unwrap();
        assert_eq!(a.ordered(&vals), ["zeta", "alpha"]);
        assert_eq!(a.x("alpha"), Some(1.0));
        assert_eq!(a.label(1.0), "alpha");
        assert_eq!(a.x("beta"), None);
    }

    #[test]
    fn size_labels_read_as_typed() {
        assert_eq!(size_label(4096.0), "4K");
        assert_eq!(size_label(65536.0), "64K");
        assert_eq!(size_label(1048576.0), "1M");
        assert_eq!(size_label(1572864.0), "1536K");
        assert_eq!(size_label(1000.0), "1000");
        assert_eq!(size_label(512.0), "512");
        assert_eq!(SweepAxis::Sizes.label(2.0 * 1073741824.0), "2G");
    }
}
