//! Field readers for the report's views of other commands' results: each
//! field is read as `Value::as_f64`, `as_str` and the like read one. A
//! field that is missing, `null` or of another type reads as `None` (or
//! empty), and only that field: the rest of the view still reads. A
//! document of an older version, or one edited by hand, loses the figures
//! it lacks and keeps the others.
//!
//! Use them as `#[serde(default, deserialize_with = "lenient::opt")]`;
//! `default` covers the missing key, the function a present one.

use serde::de::{DeserializeOwned, Deserializer, IgnoredAny};
use serde::Deserialize;
use std::collections::BTreeMap;

/// A plain value (a number, text, a flag) as `T`, `None` where it is
/// not one.
pub fn opt<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(T::deserialize(v).ok())
}

/// `v` read through the view `T` where it is an object (a view is never
/// read from an array, as serde would read a struct, field by position).
pub fn view<T: DeserializeOwned>(v: &serde_json::Value) -> Option<T> {
    v.is_object().then(|| T::deserialize(v).ok()).flatten()
}

/// A nested view: the value read as `T` where it is an object,
/// `T::default()` otherwise (`T`'s own fields being lenient, reading an
/// object never fails).
pub fn or_default<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(
    d: D,
) -> Result<T, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(view(&v).unwrap_or_default())
}

/// `Some` whenever the key is there: a nested view as in [`or_default`]
/// (`null` too reads as `T::default()`).
pub fn opt_present<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(
    d: D,
) -> Result<Option<T>, D::Error> {
    or_default(d).map(Some)
}

/// An array of views, each element read as in [`or_default`]; empty
/// where the value is not an array.
pub fn list<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Array(a) => a.iter().map(|x| view(x).unwrap_or_default()).collect(),
        _ => Vec::new(),
    })
}

/// An array of plain values (numbers, text), each `None` where it is not
/// a `T`; empty where the value is not an array.
pub fn values<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Vec<Option<T>>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Array(a) => a.into_iter().map(|x| T::deserialize(x).ok()).collect(),
        _ => Vec::new(),
    })
}

/// An object's keys, each with its value read as `T` (`None` where it is
/// not one); empty where the value is not an object.
pub fn map<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<BTreeMap<String, Option<T>>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Object(m) => m
            .into_iter()
            .map(|(k, x)| (k, T::deserialize(x).ok()))
            .collect(),
        _ => BTreeMap::new(),
    })
}

/// True: the key is there, whatever its value (`null` too). With
/// `default`, false where it is not.
pub fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    IgnoredAny::deserialize(d).map(|_| true)
}

/// True where the value is an object.
pub fn is_object<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(opt::<D, BTreeMap<String, IgnoredAny>>(d)?.is_some())
}

/// The value as it is, `Some` for any value present (`null` too).
pub fn some<'de, D: Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct Item {
        #[serde(default, deserialize_with = "opt")]
        x: Option<f64>,
        #[serde(default, deserialize_with = "opt")]
        n: Option<u64>,
        #[serde(default, deserialize_with = "opt")]
        s: Option<String>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct View {
        #[serde(default, deserialize_with = "or_default")]
        item: Item,
        #[serde(default, deserialize_with = "list")]
        items: Vec<Item>,
        #[serde(default, deserialize_with = "map")]
        by_name: BTreeMap<String, Option<f64>>,
        #[serde(default, deserialize_with = "values")]
        texts: Vec<Option<String>>,
        #[serde(default, deserialize_with = "present")]
        flag: bool,
        #[serde(default, deserialize_with = "is_object")]
        obj: bool,
        #[serde(default, deserialize_with = "some")]
        raw: Option<serde_json::Value>,
    }

    fn read(v: serde_json::Value) -> View {
        View::deserialize(&v).unwrap()
    }

    /// Each field reads as `as_f64`, `as_u64`, `as_str` would: a value of
    /// another type is missing, and only that field.
    #[test]
    fn a_field_of_another_type_is_missing_alone() {
        let v = read(json!({"item": {"x": 3, "n": 2.5, "s": 7}}));
        assert_eq!(
            v.item,
            Item {
                x: Some(3.0),
                n: None,
                s: None
            }
        );
        let v = read(json!({"item": {"x": "3", "n": -1, "s": "a"}}));
        assert_eq!(
            v.item,
            Item {
                x: None,
                n: None,
                s: Some("a".into())
            }
        );
        assert_eq!(read(json!({"item": [1]})).item, Item::default());
        assert_eq!(read(json!({"item": null})).item, Item::default());
    }

    #[test]
    fn list_elements_and_map_values_read_one_by_one() {
        let v = read(json!({"items": [{"x": 1}, 5, {"x": "no", "n": 4}]}));
        assert_eq!(v.items.len(), 3);
        assert_eq!(v.items[0].x, Some(1.0));
        assert_eq!(v.items[1], Item::default());
        assert_eq!((v.items[2].x, v.items[2].n), (None, Some(4)));
        assert!(read(json!({"items": {"x": 1}})).items.is_empty());
        // An array is no view, although serde reads a struct from one.
        let v = read(json!({"items": [[1, 2, "s"]], "item": [1]}));
        assert_eq!(
            (&v.items[..], &v.item),
            (&[Item::default()][..], &Item::default())
        );
        assert_eq!(view::<Item>(&json!([1])), None);
        assert_eq!(view::<Item>(&json!({"x": 2})).and_then(|i| i.x), Some(2.0));
        let v = read(json!({"texts": ["a", 1, null]}));
        assert_eq!(v.texts, [Some("a".to_string()), None, None]);
        let v = read(json!({"by_name": {"a": 1.5, "b": "x"}}));
        assert_eq!(
            v.by_name.into_iter().collect::<Vec<_>>(),
            [("a".to_string(), Some(1.5)), ("b".to_string(), None)]
        );
        assert!(read(json!({"by_name": [1]})).by_name.is_empty());
    }

    #[test]
    fn presence_objects_and_raw_values() {
        assert!(read(json!({"flag": null})).flag);
        assert!(!read(json!({})).flag);
        assert!(read(json!({"obj": {}})).obj);
        assert!(!read(json!({"obj": [1]})).obj);
        assert!(!read(json!({"obj": null})).obj);
        assert_eq!(
            read(json!({"raw": null})).raw,
            Some(serde_json::Value::Null)
        );
        assert_eq!(read(json!({})).raw, None);
    }
}
