//! Every recipe's encodings against the kernel's own event tables: the
//! entries the recipes use, copied from `tools/perf/pmu-events/arch/x86`
//! into `fixtures/kernel-pmu-events.json` with each file's commit. A
//! recipe event is either checked here or named below with why it is not
//! (so a new recipe event fails this test until it is one or the other).

use dmalab_counters::recipes::{find, DERIVED, RECIPES};
use serde_json::Value;
use std::collections::BTreeMap;

/// (recipe, event id) -> (table file under arch/x86, EventName).
const CHECKED: &[(&str, &str, &str, &str)] = &[
    (
        "skx-imc-dram",
        "imc_cas_rd",
        "skylakex/uncore-memory.json",
        "UNC_M_CAS_COUNT.RD",
    ),
    (
        "skx-imc-dram",
        "imc_cas_wr",
        "skylakex/uncore-memory.json",
        "UNC_M_CAS_COUNT.WR",
    ),
    (
        "icx-imc-dram",
        "imc_cas_rd",
        "icelakex/uncore-memory.json",
        "UNC_M_CAS_COUNT.RD",
    ),
    (
        "icx-imc-dram",
        "imc_cas_wr",
        "icelakex/uncore-memory.json",
        "UNC_M_CAS_COUNT.WR",
    ),
    (
        "amd-df-dram",
        "dram_ch0",
        "amdzen3/data-fabric.json",
        "dram_channel_data_controller_0",
    ),
    (
        "amd-df-dram",
        "dram_ch1",
        "amdzen3/data-fabric.json",
        "dram_channel_data_controller_1",
    ),
    (
        "amd-df-dram",
        "dram_ch2",
        "amdzen3/data-fabric.json",
        "dram_channel_data_controller_2",
    ),
    (
        "amd-df-dram",
        "dram_ch3",
        "amdzen3/data-fabric.json",
        "dram_channel_data_controller_3",
    ),
    (
        "amd-df-dram",
        "dram_ch4",
        "amdzen3/data-fabric.json",
        "dram_channel_data_controller_4",
    ),
    (
        "amd-df-dram",
        "dram_ch5",
        "amdzen3/data-fabric.json",
        "dram_channel_data_controller_5",
    ),
    (
        "amd-df-dram",
        "dram_ch6",
        "amdzen3/data-fabric.json",
        "dram_channel_data_controller_6",
    ),
    (
        "amd-df-dram",
        "dram_ch7",
        "amdzen3/data-fabric.json",
        "dram_channel_data_controller_7",
    ),
    (
        "icx-pcie",
        "pcirdcur_hit",
        "icelakex/uncore-cache.json",
        "UNC_CHA_TOR_INSERTS.IO_HIT_PCIRDCUR",
    ),
    (
        "icx-pcie",
        "pcirdcur_miss",
        "icelakex/uncore-cache.json",
        "UNC_CHA_TOR_INSERTS.IO_MISS_PCIRDCUR",
    ),
    (
        "icx-pcie",
        "itom_hit",
        "icelakex/uncore-cache.json",
        "UNC_CHA_TOR_INSERTS.IO_HIT_ITOM",
    ),
    (
        "icx-pcie",
        "itom_miss",
        "icelakex/uncore-cache.json",
        "UNC_CHA_TOR_INSERTS.IO_MISS_ITOM",
    ),
    (
        "icx-pcie",
        "rfo_hit",
        "icelakex/uncore-cache.json",
        "UNC_CHA_TOR_INSERTS.IO_HIT_RFO",
    ),
    (
        "icx-pcie",
        "rfo_miss",
        "icelakex/uncore-cache.json",
        "UNC_CHA_TOR_INSERTS.IO_MISS_RFO",
    ),
    (
        "amd-umc-dram",
        "umc_cas_rd",
        "amdzen4/memory-controller.json",
        "umc_cas_cmd.rd",
    ),
    (
        "amd-umc-dram",
        "umc_cas_wr",
        "amdzen4/memory-controller.json",
        "umc_cas_cmd.wr",
    ),
];

/// Recipe events not in the kernel's JSON tables, and why.
const NOT_IN_TABLES: &[(&str, &str)] = &[
    (
        "software",
        "perf's generic software events (enum perf_sw_ids), no table",
    ),
    (
        "core",
        "perf's generic hardware events (enum perf_hw_id), no table",
    ),
    ("mbm", "resctrl, not perf events"),
    (
        "spr-iio",
        "sysfs free-running events of uncore_snbep.c, named by the kernel",
    ),
    (
        "icx-imc-dram:imc_free_read",
        "sysfs free-running event of uncore_snbep.c",
    ),
    (
        "icx-imc-dram:imc_free_write",
        "sysfs free-running event of uncore_snbep.c",
    ),
    (
        "icx-pcie:iio_bw_in_port",
        "sysfs free-running events of uncore_snbep.c",
    ),
    // Not yet copied into the fixture (issue 31 item 4 left open): the CHA
    // TOR entries of skylakex uncore-cache.json, with their Filter words.
    ("skx-pcie", "CHA TOR entries not yet in the fixture"),
];

fn num(v: &str) -> u64 {
    let v = v.trim();
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => v.parse().unwrap(),
    }
}

/// The terms of `pmu/a=1,b=2/`.
fn terms(spec: &str) -> BTreeMap<String, u64> {
    let inner = spec.split('/').nth(1).unwrap_or("");
    inner
        .split(',')
        .filter_map(|t| t.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), num(v)))
        .collect()
}

fn fixture() -> BTreeMap<(String, String), Value> {
    let text = include_str!("fixtures/kernel-pmu-events.json");
    let doc: Value = serde_json::from_str(text).unwrap();
    let mut m = BTreeMap::new();
    for f in doc["files"].as_array().unwrap() {
        let path = f["path"].as_str().unwrap();
        let commit = f["commit"].as_str().unwrap();
        assert_eq!(commit.len(), 40, "{path}: a full commit id");
        let file = path
            .strip_prefix("tools/perf/pmu-events/arch/x86/")
            .unwrap()
            .to_string();
        for e in f["entries"].as_array().unwrap() {
            let name = e["EventName"].as_str().unwrap().to_string();
            m.insert((file.clone(), name), e.clone());
        }
    }
    m
}

#[test]
fn every_recipe_encoding_matches_the_kernel_tables() {
    let table = fixture();
    let mut checked = 0;
    for r in RECIPES {
        for (id, spec) in r.events {
            let row = CHECKED.iter().find(|c| c.0 == r.name && c.1 == *id);
            let Some(&(_, _, file, name)) = row else {
                let key = format!("{}:{id}", r.name);
                assert!(
                    NOT_IN_TABLES
                        .iter()
                        .any(|(k, _)| *k == r.name || key.starts_with(k)),
                    "{key} ({spec}) is neither checked against a kernel table nor listed with a reason"
                );
                continue;
            };
            let e = table
                .get(&(file.to_string(), name.to_string()))
                .unwrap_or_else(|| panic!("{file} {name} is not in the fixture"));
            let t = terms(spec);
            assert_eq!(
                t.get("event").copied(),
                Some(num(e["EventCode"].as_str().unwrap())),
                "{}:{id} event vs {file} {name}",
                r.name
            );
            for (json, term) in [("UMask", "umask"), ("RdWrMask", "rdwrmask")] {
                assert_eq!(
                    t.get(term).copied(),
                    e.get(json).and_then(Value::as_str).map(num),
                    "{}:{id} {term} vs {file} {name} {json}",
                    r.name
                );
            }
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        CHECKED.len(),
        "every checked row names a recipe event"
    );
}

/// The SKX IO-hit umask 0x14 is listed in no table found: it is marked
/// derived (and `dmalab info counters` prints the mark), and every
/// derived entry names an event its recipe has.
#[test]
fn derived_encodings_are_marked_and_real() {
    for (recipe, id, how) in DERIVED {
        let r = find(recipe).unwrap();
        let spec = r
            .events
            .iter()
            .find(|(i, _)| i == id)
            .unwrap_or_else(|| panic!("{recipe} has no event {id}"))
            .1;
        assert!(!how.is_empty());
        if *recipe == "skx-pcie" {
            assert_eq!(terms(spec).get("umask"), Some(&0x14), "{id}");
        }
    }
    for id in ["pcirdcur_hit", "itom_hit", "rfo_hit"] {
        assert!(
            DERIVED.iter().any(|d| d.0 == "skx-pcie" && d.1 == id),
            "{id}"
        );
    }
}
