/* copies2d.h - 2D copies (copies2d.c) and what they need of page-locked
 * memory (pinned.c); included by fake.h. */
#ifndef FAKE_CUDA_COPIES2D_H
#define FAKE_CUDA_COPIES2D_H

/* cuda.h's CUDA_MEMCPY2D (_v2) and the memory types the fake copies. */
typedef enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2 } CUmemorytype;
typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes, srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;
FK_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream);

/* Copies `rows` rows of `width` bytes, `spitch` apart at `src`, to `dpitch`
 * apart at `dst` (copies2d.c). */
void fk_copy_rows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                  size_t rows);
/* Records the rows of one 2D copy (`rows` of `len`, `pitch` apart), as one
 * queued copy. */
void fk_pinned_note_rows(struct fk_pinned *b, const char *p, size_t len, size_t pitch, size_t rows,
                         int writes, struct fk_point at);

#endif
