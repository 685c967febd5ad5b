//! RDMA for dmalab: libibverbs loaded at run time ([`sys`]), safe owners
//! of devices, memory regions, completion queues and RC queue pairs
//! ([`verbs`]), the versioned TCP handshake that connects two QPs
//! ([`handshake`]), the server behind `dmalab rdma serve` ([`serve`]), and
//! the NIC's own counters ([`counters`]).
//!
//! Nothing here needs rdma-core to build: a host without libibverbs gets a
//! [`dmalab_core::UsageError`] naming the packages to install.

pub mod access;
pub mod buffer;
pub mod client;
pub mod counters;
pub mod error;
pub mod handshake;
pub mod mock;
pub mod serve;
pub mod sys;
pub mod verbs;

pub use error::RdmaError;
