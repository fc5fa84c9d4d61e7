//! Allocation requests: what an instance asks the manager for.

use crate::{DType, Element, MemError};

/// Where a requested array lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Device (VRAM) memory, allocated stream-ordered on the group's stream.
    #[default]
    Device,
    /// Page-locked host memory, directly reachable by DMA copies.
    Pinned,
}

/// The default chunk axis: the run axis of `[time, variable, run]`.
pub(crate) const DEFAULT_CHUNK_AXIS: usize = 2;

/// A description of one array an instance needs.
///
/// ```
/// use cubie_mem::{ArrayRequest, DType, MemoryKind};
///
/// let state = ArrayRequest::new(DType::F64, [10, 3, 1000]).total_runs(1000);
/// assert!(state.is_chunkable());
/// assert_eq!(state.nbytes().unwrap(), 10 * 3 * 1000 * 8);
///
/// let status = ArrayRequest::of::<i32>([1000]).memory(MemoryKind::Pinned).chunk_axis(0);
/// assert_eq!(status.axis(), Some(0));
/// ```
// Kept small, so that a set of eight with their labels stays under glibc's
// 1 KiB large-allocation threshold (an allocation above it consolidates the
// allocator's free lists first): the shape is a boxed slice, and the chunk
// axis a number beside flags.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ArrayRequest {
    dtype: DType,
    shape: Box<[usize]>,
    /// The chunk axis when `has_chunk_axis` is set, else 0 (so that equal
    /// requests compare and hash equal).
    chunk_axis: usize,
    total_runs: usize,
    depth: usize,
    /// The stream group of the buffer struct that declared the request
    /// (`#[derive(GpuBuffers)]` sets it): queueing it for an instance of
    /// another group is refused.
    declared_group: Option<&'static str>,
    memory: MemoryKind,
    has_chunk_axis: bool,
    unchunkable: bool,
    /// Whether the planner splits the array along `chunk_axis`, kept in
    /// step with the fields it follows from (`with_chunkability`).
    chunkable: bool,
}

impl std::fmt::Debug for ArrayRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrayRequest")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("memory", &self.memory)
            .field("chunk_axis", &self.axis())
            .field("unchunkable", &self.unchunkable)
            .field("total_runs", &self.total_runs)
            .field("depth", &self.depth)
            .field("declared_group", &self.declared_group)
            .finish()
    }
}

impl ArrayRequest {
    /// The chunk axis unless told otherwise: 2, the run axis of
    /// `[time, variable, run]`.
    pub const DEFAULT_CHUNK_AXIS: usize = DEFAULT_CHUNK_AXIS;

    /// A device array of `dtype` with `shape`, chunked along axis 2, for one run.
    pub fn new(dtype: DType, shape: impl Into<Vec<usize>>) -> Self {
        ArrayRequest {
            dtype,
            shape: shape.into().into_boxed_slice(),
            chunk_axis: DEFAULT_CHUNK_AXIS,
            total_runs: 1,
            depth: 1,
            declared_group: None,
            memory: MemoryKind::Device,
            has_chunk_axis: true,
            unchunkable: false,
            chunkable: false,
        }
        .with_chunkability()
    }

    /// This request with `chunkable` set from the fields it follows from: a chunk axis inside the shape, longer than 1, and not flagged
    /// unchunkable.
    fn with_chunkability(mut self) -> Self {
        self.chunkable = !self.unchunkable
            && self.has_chunk_axis
            && self.shape.get(self.chunk_axis).is_some_and(|&len| len > 1);
        self
    }

    /// [`ArrayRequest::new`] with the element type taken from `T`.
    pub fn of<T: Element>(shape: impl Into<Vec<usize>>) -> Self {
        Self::new(crate::dtype::dtype_of::<T>(), shape)
    }

    /// Sets where the array lives.
    pub fn memory(mut self, kind: MemoryKind) -> Self {
        self.memory = kind;
        self
    }

    /// Sets the axis along which the batch is split; `None` means no axis.
    pub fn chunk_axis(mut self, axis: impl Into<Option<usize>>) -> Self {
        let axis = axis.into();
        self.has_chunk_axis = axis.is_some();
        self.chunk_axis = axis.unwrap_or(0);
        self.with_chunkability()
    }

    /// Marks the array as never split (allocated whole in every chunk).
    pub fn unchunkable(mut self) -> Self {
        self.unchunkable = true;
        self.with_chunkability()
    }

    /// Sets the number of runs in the batch (validated to be at least 1 when queued).
    pub fn total_runs(mut self, runs: usize) -> Self {
        self.total_runs = runs;
        self
    }

    /// Sets the pipeline depth: the chunks in flight, each in its own buffer
    /// set (default 1). Depth 2 overlaps copies with compute; an array both
    /// read and written needs 3. The chunkable budget is shared among the sets.
    ///
    /// ```
    /// use cubie_mem::ArrayRequest;
    ///
    /// let state = ArrayRequest::of::<f64>([10, 3, 1000]).total_runs(1000).pipeline_depth(2);
    /// assert_eq!(state.depth(), 2);
    /// assert_eq!(ArrayRequest::of::<f64>([3]).depth(), 1);
    /// assert!(ArrayRequest::of::<f64>([3]).pipeline_depth(0).validate("x").is_err());
    /// ```
    pub fn pipeline_depth(mut self, depth: usize) -> Self {
        self.depth = depth;
        self
    }

    /// The pipeline depth: chunks in flight, each with its own buffer set.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The stream group of the buffer struct that declared the request.
    pub(crate) fn declared_group(&self) -> Option<&'static str> {
        self.declared_group
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The full (unchunked) shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Where the array lives.
    pub fn memory_kind(&self) -> MemoryKind {
        self.memory
    }

    /// The chunk axis, if any.
    pub fn axis(&self) -> Option<usize> {
        self.has_chunk_axis.then_some(self.chunk_axis)
    }

    /// Whether the request was flagged unchunkable.
    pub fn is_flagged_unchunkable(&self) -> bool {
        self.unchunkable
    }

    /// The batch's run count as this request states it.
    pub fn runs(&self) -> usize {
        self.total_runs
    }

    /// Whether the planner may split this array: a chunk axis inside the
    /// shape, longer than 1, and not flagged unchunkable.
    #[inline]
    pub fn is_chunkable(&self) -> bool {
        self.chunkable
    }

    /// The chunk axis when it has length 0: a run-count mismatch.
    pub(crate) fn empty_chunk_axis(&self) -> Option<usize> {
        let axis = self.axis().filter(|_| !self.unchunkable)?;
        (self.shape.get(axis) == Some(&0)).then_some(axis)
    }

    /// The axis that holds the batch's runs, which pipelines bind along by
    /// default. Unlike [`chunk_axis_in_use`](Self::chunk_axis_in_use), kept
    /// for an axis of one run.
    pub(crate) fn run_axis(&self) -> Option<usize> {
        self.axis()
            .filter(|&axis| !self.unchunkable && axis < self.shape.len())
    }

    /// The axis the planner splits, when the request is chunkable.
    #[inline]
    pub(crate) fn chunk_axis_in_use(&self) -> Option<usize> {
        self.chunkable.then_some(self.chunk_axis)
    }

    /// The chunk axis, when lying beyond the shape is the only reason the
    /// request is unchunkable (a 2-D array on the default axis, say).
    pub(crate) fn axis_out_of_range(&self) -> Option<usize> {
        let axis = self.axis()?;
        (!self.unchunkable && self.total_runs > 1 && axis >= self.shape.len()).then_some(axis)
    }

    /// Number of elements, or `None` when the product overflows.
    pub fn elements(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
    }

    /// Size in bytes of the full array.
    pub fn nbytes(&self) -> Result<u64, MemError> {
        self.byte_size().ok_or_else(|| self.overflow())
    }

    /// The size in bytes of the full array, `None` when it overflows 64
    /// bits.
    #[inline]
    pub(crate) fn byte_size(&self) -> Option<u64> {
        self.elements()
            .and_then(|n| n.checked_mul(self.dtype.size_bytes() as u64))
    }

    /// The error of [`ArrayRequest::nbytes`] when the size overflows.
    #[cold]
    fn overflow(&self) -> MemError {
        MemError::invalid_request(
            "",
            format!("shape {:?} overflows 64-bit byte counts", self.shape),
        )
    }

    /// The shape with the chunk axis (when chunkable) set to `chunk_length`.
    pub fn chunked_shape(&self, chunk_length: usize) -> Vec<usize> {
        self.chunked_dims(chunk_length).collect()
    }

    /// [`ArrayRequest::chunked_shape`], reusing this request's shape.
    pub(crate) fn into_chunked_shape(self, chunk_length: usize) -> Vec<usize> {
        let axis = self.chunk_axis_in_use();
        let mut shape = self.shape.into_vec();
        if let Some(dim) = axis.and_then(|axis| shape.get_mut(axis)) {
            *dim = chunk_length;
        }
        shape
    }

    /// The dimensions of [`ArrayRequest::chunked_shape`], without allocating.
    pub fn chunked_dims(&self, chunk_length: usize) -> impl ExactSizeIterator<Item = usize> + '_ {
        let axis = self.chunk_axis_in_use();
        self.shape
            .iter()
            .enumerate()
            .map(move |(i, &d)| if Some(i) == axis { chunk_length } else { d })
    }

    /// Checks a request on its own: runs and depth at least 1, and a byte
    /// size within 64 bits.
    pub fn validate(&self, label: &str) -> Result<(), MemError> {
        if self.total_runs == 0 || self.depth == 0 || self.byte_size().is_none() {
            return Err(self.invalid(label));
        }
        Ok(())
    }

    /// The first of [`ArrayRequest::validate`]'s checks that fails, as an
    /// error naming `label`.
    #[cold]
    fn invalid(&self, label: &str) -> MemError {
        self.check_runs(label)
            .and_then(|()| self.check_depth(label))
            .and_then(|()| self.checked_nbytes(label))
            .err()
            .unwrap_or_else(|| MemError::invalid_request(label, "invalid request"))
    }

    /// `depth >= 1`, or an error naming `label`.
    #[inline]
    pub(crate) fn check_depth(&self, label: &str) -> Result<(), MemError> {
        if self.depth == 0 {
            return Err(zero_depth(label));
        }
        Ok(())
    }

    /// `total_runs >= 1`, or an error naming `label`.
    #[inline]
    pub(crate) fn check_runs(&self, label: &str) -> Result<(), MemError> {
        if self.total_runs == 0 {
            return Err(zero_runs(label));
        }
        Ok(())
    }

    /// The byte size, or an error naming `label` when it overflows 64 bits.
    #[inline]
    pub(crate) fn checked_nbytes(&self, label: &str) -> Result<u64, MemError> {
        match self.byte_size() {
            Some(bytes) => Ok(bytes),
            None => Err(self.overflow_of(label)),
        }
    }

    /// The error of [`ArrayRequest::checked_nbytes`].
    #[cold]
    fn overflow_of(&self, label: &str) -> MemError {
        MemError::invalid_request(
            label,
            format!(
                "shape {:?} of {} overflows 64-bit byte counts",
                self.shape, self.dtype
            ),
        )
    }
}

/// The error of a request of pipeline depth 0, labelled `label`.
#[cold]
fn zero_depth(label: &str) -> MemError {
    MemError::invalid_request(
        label,
        "pipeline depth is 0; it must be at least 1 (one buffer set per chunk in flight): \
         use .pipeline_depth(1) for no overlap, 2 to overlap copies with compute",
    )
}

/// The error of a request of 0 runs, labelled `label`.
#[cold]
fn zero_runs(label: &str) -> MemError {
    MemError::invalid_request(label, "total_runs is 0; a batch has at least one run")
}

/// Labelled requests in insertion order; an existing label is replaced in place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestSet {
    /// Labels as boxed strings, a word smaller than `String`, so a set of
    /// eight stays under glibc's 1 KiB large-allocation threshold.
    entries: Vec<(Box<str>, ArrayRequest)>,
}

impl RequestSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the request under `label`.
    pub fn insert(&mut self, label: impl Into<String>, request: ArrayRequest) {
        let label = label.into().into_boxed_str();
        match self.entries.iter_mut().find(|(l, _)| *l == label) {
            Some(entry) => entry.1 = request,
            None => self.entries.push((label, request)),
        }
    }

    /// Builder form of [`RequestSet::insert`].
    pub fn with(mut self, label: impl Into<String>, request: ArrayRequest) -> Self {
        self.insert(label, request);
        self
    }

    /// The request under `label`.
    pub fn get(&self, label: &str) -> Option<&ArrayRequest> {
        self.entries
            .iter()
            .find(|(l, _)| **l == *label)
            .map(|(_, r)| r)
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Labels and requests in insertion order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &ArrayRequest)> + Clone {
        self.entries.iter().map(|(l, r)| (&**l, r))
    }

    /// Labels in insertion order.
    pub fn labels(&self) -> impl ExactSizeIterator<Item = &str> {
        self.entries.iter().map(|(l, _)| &**l)
    }

    /// A set of `requests` whose labels are distinct; the first label given
    /// twice is the error.
    pub(crate) fn from_distinct<L: Into<String>>(
        requests: impl IntoIterator<Item = (L, ArrayRequest)>,
    ) -> Result<Self, String> {
        let requests = requests.into_iter();
        let mut entries: Vec<(Box<str>, ArrayRequest)> = Vec::with_capacity(requests.size_hint().0);
        for (label, request) in requests {
            let label = label.into().into_boxed_str();
            if entries.iter().any(|(l, _)| *l == label) {
                return Err(label.into());
            }
            entries.push((label, request));
        }
        Ok(RequestSet { entries })
    }

    /// Marks every request as declared by a buffer struct of stream group
    /// `group`.
    pub(crate) fn declare_group(&mut self, group: &'static str) {
        for (_, request) in &mut self.entries {
            request.declared_group = Some(group);
        }
    }

    /// Validates every request (see [`ArrayRequest::validate`]).
    pub fn validate(&self) -> Result<(), MemError> {
        self.iter().try_for_each(|(label, r)| r.validate(label))
    }
}

impl<L: Into<String>> FromIterator<(L, ArrayRequest)> for RequestSet {
    fn from_iter<I: IntoIterator<Item = (L, ArrayRequest)>>(iter: I) -> Self {
        let iter = iter.into_iter();
        let mut set = RequestSet {
            entries: Vec::with_capacity(iter.size_hint().0),
        };
        for (label, request) in iter {
            set.insert(label, request);
        }
        set
    }
}

impl IntoIterator for RequestSet {
    type Item = (String, ArrayRequest);
    type IntoIter = std::iter::Map<
        std::vec::IntoIter<(Box<str>, ArrayRequest)>,
        fn((Box<str>, ArrayRequest)) -> (String, ArrayRequest),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.entries
            .into_iter()
            .map(|(label, request)| (label.into_string(), request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_cubie() {
        let r = ArrayRequest::new(DType::F32, [4, 5, 6]);
        assert_eq!(r.axis(), Some(2));
        assert_eq!(r.memory_kind(), MemoryKind::Device);
        assert_eq!(r.runs(), 1);
        assert!(!r.is_flagged_unchunkable());
        assert!(r.is_chunkable());
    }

    #[test]
    fn chunkability_rules() {
        let base = ArrayRequest::of::<f64>([4, 5, 6]);
        assert!(!base.clone().unchunkable().is_chunkable());
        assert!(!ArrayRequest::of::<f64>(Vec::new()).is_chunkable());
        assert!(!base.clone().chunk_axis(None).is_chunkable());
        assert!(!base.clone().chunk_axis(3).is_chunkable());
        assert!(!ArrayRequest::of::<f64>([4, 5, 1]).is_chunkable());
        assert!(base.chunk_axis(0).is_chunkable());
    }

    #[test]
    fn chunked_shape_replaces_only_the_chunk_axis() {
        let r = ArrayRequest::of::<f32>([10, 3, 100]).chunk_axis(2);
        assert_eq!(r.chunked_shape(7), vec![10, 3, 7]);
        let u = r.clone().unchunkable();
        assert_eq!(u.chunked_shape(7), vec![10, 3, 100]);
    }

    #[test]
    fn validation_reports_zero_runs_and_overflow() {
        let zero = ArrayRequest::of::<f32>([3]).total_runs(0);
        assert!(matches!(
            zero.validate("x"),
            Err(MemError::InvalidRequest { .. })
        ));
        let huge = ArrayRequest::of::<f64>([usize::MAX, 4]);
        assert!(huge.validate("y").is_err());
        assert!(huge.nbytes().is_err());
    }

    #[test]
    fn depth_defaults_to_one_and_zero_is_rejected() {
        let r = ArrayRequest::of::<f32>([4, 5, 6]);
        assert_eq!(r.depth(), 1);
        assert_eq!(r.clone().pipeline_depth(3).depth(), 3);
        let error = r.pipeline_depth(0).validate("state").unwrap_err();
        assert!(
            matches!(&error, MemError::InvalidRequest { label, reason }
                if label == "state" && reason.contains(".pipeline_depth(1)")),
            "{error}"
        );
    }

    #[test]
    fn a_set_of_eight_stays_under_a_kibibyte() {
        assert!(8 * std::mem::size_of::<(Box<str>, ArrayRequest)>() <= 1008);
    }

    #[test]
    fn the_chunk_axis_compares_hashes_and_prints_as_an_option() {
        use std::hash::{BuildHasher, RandomState};
        let none = ArrayRequest::of::<f32>([4, 5]).chunk_axis(None);
        let reset = ArrayRequest::of::<f32>([4, 5])
            .chunk_axis(1)
            .chunk_axis(None);
        assert_eq!(none, reset);
        let hasher = RandomState::new();
        assert_eq!(hasher.hash_one(&none), hasher.hash_one(&reset));
        assert_ne!(none, ArrayRequest::of::<f32>([4, 5]).chunk_axis(0));
        assert_eq!(reset.axis(), None);
        assert_eq!(
            format!("{:?}", ArrayRequest::of::<f32>([4, 5]).chunk_axis(1)),
            "ArrayRequest { dtype: F32, shape: [4, 5], memory: Device, chunk_axis: Some(1), \
             unchunkable: false, total_runs: 1, depth: 1, declared_group: None }"
        );
    }

    #[test]
    fn request_set_keeps_insertion_order_and_replaces() {
        let mut set: RequestSet = [
            ("b", ArrayRequest::of::<f32>([1])),
            ("a", ArrayRequest::of::<f32>([2])),
        ]
        .into_iter()
        .collect();
        set.insert("b", ArrayRequest::of::<f64>([3]));
        assert_eq!(set.labels().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(set.get("b").map(|r| r.dtype()), Some(DType::F64));
    }
}
