//! CSV renderings: one row per cell (the statistics table) and one row per
//! run. Numbers are raw (the unit is its own column), so spreadsheets and
//! pandas read them as they are.

use crate::analysis::Cell;
use crate::record::Results;
use dmalab_core::schema::RunStatus;

fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn num(v: Option<f64>) -> String {
    v.map(|x| format!("{x}")).unwrap_or_default()
}

/// The statistics table.
pub fn cells(cells: &[Cell]) -> String {
    let mut out = String::from(
        "configuration,victim,load,sweep_value,unit,better,n,failed,mean,median,sd,cv_pct,ci_lo,ci_hi,change_pct,change_pct_ci_lo,change_pct_ci_hi,change,slowdown_factor,slowdown_factor_ci_lo,slowdown_factor_ci_hi,mwu_u,mwu_p,mwu_method,noisy,aggressor_bw_bytes,aggressor_cmd_per_s\n",
    );
    for c in cells {
        let s = c.summary.as_ref();
        let row = [
            field(&c.configuration),
            field(&c.victim),
            field(&c.load),
            field(c.sweep_value.as_deref().unwrap_or("")),
            field(&c.unit),
            format!("{:?}", c.better).to_lowercase(),
            c.values.len().to_string(),
            c.failed.to_string(),
            num(s.map(|s| s.mean)),
            num(s.map(|s| s.median)),
            num(s.map(|s| s.sd)),
            num(s.map(|s| s.cv_pct)),
            num(s.map(|s| s.ci_lo)),
            num(s.map(|s| s.ci_hi)),
            num(c.change_pct),
            num(c.change_pct_ci.map(|x| x.0)),
            num(c.change_pct_ci.map(|x| x.1)),
            c.change.map(|x| x.word().to_string()).unwrap_or_default(),
            num(c.slowdown),
            num(c.slowdown_ci.map(|x| x.0)),
            num(c.slowdown_ci.map(|x| x.1)),
            num(c.mwu.map(|m| m.u)),
            num(c.mwu.map(|m| m.p)),
            c.mwu
                .map(|m| format!("{:?}", m.method).to_lowercase())
                .unwrap_or_default(),
            c.noisy.to_string(),
            num(c.aggressor_bw_bytes),
            num(c.aggressor_cmd_per_s),
        ];
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// One row per run.
pub fn runs(res: &Results) -> String {
    let mut out = String::from(
        "index,configuration,repetition,victim,load,sweep_value,status,value,unit,victim_wall_ns,aggressor_data_bytes,aggressor_commands,aggressor_window_ns,aggressor_bw_bytes,failure\n",
    );
    for r in &res.runs {
        let e = r.aggressor.as_ref().and_then(|a| a.evidence.as_ref());
        let row = [
            r.index.to_string(),
            field(&r.configuration),
            r.repetition.to_string(),
            field(&r.victim),
            field(&r.load),
            field(r.sweep_value.as_deref().unwrap_or("")),
            if r.status == RunStatus::Completed {
                "completed"
            } else {
                "failed"
            }
            .into(),
            num(r.value),
            field(&r.unit),
            r.victim_wall_ns.to_string(),
            e.map(|e| e.data_bytes.to_string()).unwrap_or_default(),
            e.map(|e| e.commands.to_string()).unwrap_or_default(),
            e.map(|e| e.window_ns.to_string()).unwrap_or_default(),
            num(e.map(|e| e.bw_bytes)),
            field(r.failure.as_ref().map_or("", |f| f.reason.as_str())),
        ];
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}
