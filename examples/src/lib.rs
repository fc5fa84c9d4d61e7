//! Code the examples share: the hand-written CUDA kernel of the GPU examples
//! (feature `cuda`), launched on the manager's memory through the CUDA
//! backend's interop.

#[cfg(feature = "cuda")]
pub mod euler_decay;
