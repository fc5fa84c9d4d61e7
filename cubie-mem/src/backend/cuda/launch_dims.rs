//! The shape of a kernel launch: its grid, its blocks and its dynamic
//! shared memory.

/// A grid of blocks of threads and the dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    /// Blocks in x, y and z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y and z.
    pub block: (u32, u32, u32),
    /// Bytes of dynamic shared memory per block.
    pub shared_bytes: u32,
}

impl LaunchDims {
    /// One thread per element, `block_threads` to a block (at least one),
    /// with enough blocks for `elements` (at least one block).
    pub fn for_elements(elements: u32, block_threads: u32) -> Self {
        let block_threads = block_threads.max(1);
        LaunchDims {
            grid: (elements.div_ceil(block_threads).max(1), 1, 1),
            block: (block_threads, 1, 1),
            shared_bytes: 0,
        }
    }
}
