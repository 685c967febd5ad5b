//! dmalab run/report/compare: interference experiments, statistics and the HTML report.
