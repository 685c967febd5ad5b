//! dmalab's statistics against scipy's, from the committed fixture that
//! `scripts/stats-expected.py` wrote.

use dmalab_run::stats::{self, MwuMethod};
use serde_json::Value;

fn fixture() -> Value {
    let text = include_str!("data/stats-expected.json");
    serde_json::from_str(text).expect("fixture is JSON")
}

fn arr(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(a: f64, b: f64, rel: f64, what: &str) {
    let tol = rel * b.abs().max(1e-300);
    assert!(
        (a - b).abs() <= tol,
        "{what}: dmalab {a} vs scipy {b} (tolerance {tol})"
    );
}

#[test]
fn descriptive_statistics_match_scipy() {
    for c in fixture()["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        for key in ["plain", "loaded"] {
            let x = arr(&c[key]);
            let e = &c[format!("{key}_stats")];
            close(
                stats::mean(&x),
                e["mean"].as_f64().unwrap(),
                1e-12,
                &format!("{name} {key} mean"),
            );
            close(
                stats::median(&x),
                e["median"].as_f64().unwrap(),
                1e-12,
                &format!("{name} {key} median"),
            );
            close(
                stats::sd(&x),
                e["sd"].as_f64().unwrap(),
                1e-10,
                &format!("{name} {key} sd"),
            );
        }
    }
}

#[test]
fn bootstrap_intervals_match_scipy_within_monte_carlo_error() {
    for c in fixture()["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        for key in ["plain", "loaded"] {
            let x = arr(&c[key]);
            let e = &c[format!("{key}_stats")];
            let (lo, hi) = stats::bootstrap_mean_ci(&x, stats::RESAMPLES, stats::SEED);
            // The Monte Carlo error of a 2.5% quantile of 10,000 resampled
            // means is about 0.03 standard errors; allow 0.25.
            let se = stats::sd(&x) / (x.len() as f64).sqrt();
            for (got, want, end) in [
                (lo, e["ci_lo"].as_f64().unwrap(), "lo"),
                (hi, e["ci_hi"].as_f64().unwrap(), "hi"),
            ] {
                assert!(
                    (got - want).abs() <= 0.25 * se,
                    "{name} {key} ci_{end}: dmalab {got} vs scipy {want} (se {se})"
                );
            }
        }
        let plain = arr(&c["plain"]);
        let loaded = arr(&c["loaded"]);
        close(
            stats::mean(&loaded) / stats::mean(&plain),
            c["ratio"].as_f64().unwrap(),
            1e-12,
            name,
        );
        let (lo, hi) = stats::bootstrap_ratio_ci(&loaded, &plain, stats::RESAMPLES, stats::SEED);
        let want = arr(&c["ratio_ci"]);
        let width = want[1] - want[0];
        assert!(
            (lo - want[0]).abs() <= 0.08 * width,
            "{name} ratio lo {lo} vs {}",
            want[0]
        );
        assert!(
            (hi - want[1]).abs() <= 0.08 * width,
            "{name} ratio hi {hi} vs {}",
            want[1]
        );
    }
}

#[test]
fn mann_whitney_matches_scipy() {
    for c in fixture()["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let plain = arr(&c["plain"]);
        let loaded = arr(&c["loaded"]);
        let a = stats::mann_whitney(&loaded, &plain, Some(MwuMethod::Asymptotic)).unwrap();
        close(
            a.u,
            c["mwu_u"].as_f64().unwrap(),
            1e-12,
            &format!("{name} U"),
        );
        close(
            a.p,
            c["mwu_p_asymptotic"].as_f64().unwrap(),
            1e-9,
            &format!("{name} asymptotic p"),
        );
        if let Some(p) = c.get("mwu_p_exact").and_then(|v| v.as_f64()) {
            let e = stats::mann_whitney(&loaded, &plain, Some(MwuMethod::Exact)).unwrap();
            close(e.p, p, 1e-9, &format!("{name} exact p"));
            // Small samples without ties get the exact test by default.
            let auto = stats::mann_whitney(&loaded, &plain, None).unwrap();
            if plain.len() + loaded.len() <= stats::EXACT_MAX_N {
                assert_eq!(auto.method, MwuMethod::Exact, "{name}");
            }
        } else {
            let auto = stats::mann_whitney(&loaded, &plain, None).unwrap();
            assert_eq!(
                auto.method,
                MwuMethod::Asymptotic,
                "{name}: ties force the normal approximation"
            );
        }
    }
}

#[test]
fn attribution_matches_scipy() {
    for c in fixture()["attribution_cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let (plain, control, loaded) = (arr(&c["plain"]), arr(&c["control"]), arr(&c["loaded"]));
        close(
            stats::dma_share(&loaded, &control, &plain),
            c["share"].as_f64().unwrap(),
            1e-12,
            &format!("{name} share"),
        );
        close(
            stats::mean(&loaded) / stats::mean(&control),
            c["vs_control"].as_f64().unwrap(),
            1e-12,
            &format!("{name} vs control"),
        );
        // Bootstrap ends within Monte Carlo error: 8% of the interval's
        // width, as for the ratio against plain.
        for (got, key) in [
            (
                stats::bootstrap_share_ci(&loaded, &control, &plain, stats::RESAMPLES, stats::SEED),
                "share_ci",
            ),
            (
                stats::bootstrap_ratio_ci(&loaded, &control, stats::RESAMPLES, stats::SEED),
                "vs_control_ci",
            ),
        ] {
            let want = arr(&c[key]);
            let width = want[1] - want[0];
            assert!(
                (got.0 - want[0]).abs() <= 0.08 * width && (got.1 - want[1]).abs() <= 0.08 * width,
                "{name} {key}: dmalab {got:?} vs scipy {want:?}"
            );
        }
    }
}
