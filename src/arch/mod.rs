//! What a model is, below both the model runtime (`crate::model`) and the GPU runtime
//! (`crate::gpu`), which each read it and neither of which it knows: the configuration of an
//! architecture, the weights as loaded, the blocks a forward pass takes (their masks and the keys
//! each row sees) and the KV cache.

pub mod batch;
pub mod config;
pub mod kv_cache;
pub mod visible;
pub mod weights;
