//! One module per subcommand. Shared flag groups live in `common`.

pub mod children;
pub mod cleanup;
pub mod common;
pub mod compare;
pub mod counters;
pub mod ddio;
pub mod docs;
pub mod fleet;
pub mod info;
pub mod load;
pub mod page;
pub mod probe;
pub mod rdma;
pub mod report;
pub mod run;
pub mod seams;
pub mod sim;
pub mod stat;
pub mod throttle;
