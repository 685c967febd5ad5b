//! The counters a victim (`dmalab stat` around it) or an aggressor
//! (`dmalab load --counters`) counted over a run: the part of
//! `dmalab_counters::session::CounterReport` the report's counters section
//! reads, under the result's `counters` key. Every field is read
//! leniently ([`super::lenient`]); the schema test writes the counters
//! library's own report and reads it back.

use super::lenient;
use serde::Deserialize;

/// A run's result as far as its counters go.
#[derive(Debug, Default, Deserialize)]
struct WithCounters {
    /// Present whenever the result has a `counters` key.
    #[serde(default, deserialize_with = "lenient::opt_present")]
    counters: Option<Counters>,
}

/// What a session counted (`CounterReport`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Counters {
    /// Exact mode: this run counted one event group (`exact_group` is
    /// there).
    #[serde(default, deserialize_with = "lenient::present")]
    pub exact_group: bool,
    /// Lowest running fraction of any counted hardware event.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub min_running_fraction: Option<f64>,
    /// Metrics over the whole session.
    #[serde(default, deserialize_with = "lenient::list")]
    pub metrics: Vec<Metric>,
    /// Counted events.
    #[serde(default, deserialize_with = "lenient::list")]
    pub events: Vec<Event>,
    /// Events that could not be counted.
    #[serde(default, deserialize_with = "lenient::list")]
    pub unavailable: Vec<NotCounted>,
}

/// A derived metric (`dmalab_counters::recipes::MetricValue`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Metric {
    /// Its name.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub name: Option<String>,
    /// Its value; `None` where an event it needs was not counted.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub value: Option<f64>,
    /// Its unit.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub unit: Option<String>,
}

/// An event's count (`dmalab_counters::session::EventCount`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Event {
    /// Its id.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub id: Option<String>,
    /// The count, scaled for multiplexing, in `unit`.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub value: Option<f64>,
    /// Unit of `value`.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub unit: Option<String>,
    /// A whole count, never scaled.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub exact: Option<bool>,
}

/// An event that could not be counted (`dmalab_counters::session::Unavailable`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct NotCounted {
    /// Its id.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub id: Option<String>,
    /// Why, in words.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub message: Option<String>,
}

/// The counters of a run's result (a victim's or an aggressor's), `None`
/// where it has no `counters` key (or is not an object).
pub fn of(result: &serde_json::Value) -> Option<Counters> {
    lenient::view::<WithCounters>(result)?.counters
}

/// A `dmalab stat --output` document, as far as its counters go.
#[derive(Default, Deserialize)]
struct StatDoc {
    #[serde(default, deserialize_with = "lenient::or_default")]
    result: StatResult,
}

#[derive(Default, Deserialize)]
struct StatResult {
    #[serde(default, deserialize_with = "lenient::some")]
    counters: Option<serde_json::Value>,
}

/// The counters of a `dmalab stat --output` document (what stat counted
/// around a victim), as written: the victim's result carries them whole.
/// `None` where the document has none or is not one.
pub fn of_stat_document(doc: &[u8]) -> Option<serde_json::Value> {
    let doc: serde_json::Value = serde_json::from_slice(doc).ok()?;
    lenient::view::<StatDoc>(&doc)?.result.counters
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A report as the counters library writes it, read back: each figure
    /// the section shows is there (a field renamed on either side leaves
    /// one without).
    #[test]
    fn counters_are_read_from_the_counter_librarys_own_report() {
        use dmalab_counters::recipes::MetricValue;
        use dmalab_counters::session::{CounterReport, EventCount, ExactGroup, Unavailable};
        let event = EventCount {
            id: "cycles".into(),
            spec: "cycles".into(),
            pmus: vec![],
            counters: 1,
            value: 1e9,
            unit: "cycles".into(),
            raw_count: 1_000_000_000,
            running_fraction: 0.5,
            running_ns: 0,
            exact: true,
            software: false,
            per_socket: vec![],
        };
        let report = CounterReport {
            requested: "core".into(),
            recipes: vec![],
            cpu: Default::default(),
            scope: "task".into(),
            counted_ns: 1,
            events: vec![event],
            metrics: vec![MetricValue {
                name: "ipc".into(),
                unit: "instructions/cycle".into(),
                value: Some(1.25),
                events: vec![],
            }],
            unavailable: vec![Unavailable {
                id: "llc".into(),
                spec: "llc".into(),
                reason: dmalab_counters::spec::Absence::NotCounted,
                message: "not on this CPU".into(),
            }],
            min_running_fraction: Some(0.5),
            series: vec![],
            exact_group: Some(ExactGroup {
                index: 0,
                of: 2,
                run: 0,
            }),
            sockets: vec![],
        };
        // Stat writes it around a victim; the victim's result carries it.
        let stat = dmalab_core::schema::ResultDoc::new(
            "stat",
            Default::default(),
            (),
            json!({ "wall_ns": 1u64, "exit_code": 0, "counters": &report }),
            std::time::SystemTime::now(),
        );
        let counted = of_stat_document(&serde_json::to_vec(&stat).unwrap()).unwrap();
        assert_eq!(counted, serde_json::to_value(&report).unwrap());
        let result = json!({ "wall_s": 1.0, "counters": counted });
        let c = of(&result).unwrap();
        assert_eq!(
            c,
            Counters {
                exact_group: true,
                min_running_fraction: Some(0.5),
                metrics: vec![Metric {
                    name: Some("ipc".into()),
                    value: Some(1.25),
                    unit: Some("instructions/cycle".into()),
                }],
                events: vec![Event {
                    id: Some("cycles".into()),
                    value: Some(1e9),
                    unit: Some("cycles".into()),
                    exact: Some(true),
                }],
                unavailable: vec![NotCounted {
                    id: Some("llc".into()),
                    message: Some("not on this CPU".into()),
                }],
            }
        );
    }

    /// A result without counters has none; one whose counters are not an
    /// object still counts as a run with counters, with nothing in them
    /// (as the report has always counted it).
    #[test]
    fn a_stat_document_without_counters_has_none() {
        assert_eq!(of_stat_document(br#"{"result": {"wall_ns": 1}}"#), None);
        assert_eq!(of_stat_document(br#"{"result": null}"#), None);
        assert_eq!(of_stat_document(b"[1]"), None);
        assert_eq!(of_stat_document(br#"[{"counters": 1}]"#), None);
        assert_eq!(of_stat_document(br#"{"result": [{"counters": 1}]}"#), None);
        assert_eq!(
            of_stat_document(br#"{"result": {"counters": {"events": []}}}"#),
            Some(json!({"events": []}))
        );
    }

    #[test]
    fn counters_are_there_when_the_key_is() {
        assert_eq!(of(&json!({"wall_s": 1.0})), None);
        assert_eq!(of(&json!([1])), None);
        assert_eq!(of(&json!({"counters": null})), Some(Counters::default()));
        let c =
            of(&json!({"counters": {"exact_group": null, "events": [3, {"id": "x"}]}})).unwrap();
        assert!(c.exact_group);
        assert_eq!(c.events.len(), 2);
        assert_eq!(c.events[1].id.as_deref(), Some("x"));
    }
}
