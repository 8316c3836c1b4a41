//! Re-exports llguidance so that this static library holds its C interface (llguidance.h).
pub use llguidance;
