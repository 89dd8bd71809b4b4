// Constants shared by the GEMV shaders (GLSL, through glslc -I) and the C++
// catalogue, so tile sizes and specialization-constant ids cannot drift.
// Plain #defines with integer literals only: this file must parse as GLSL 450
// and as C++. The C++ side wraps them in typed constants (catalogue.h).
#ifndef COLI_SHADERS_GEMV_CONSTANTS_H
#define COLI_SHADERS_GEMV_CONSTANTS_H

// Specialization constant ids (VkSpecializationMapEntry::constantID).
#define COLI_GEMV_SPEC_ID_WORKGROUP_SIZE 0      /* local_size_x */
#define COLI_GEMV_SPEC_ID_ROWS_PER_WORKGROUP 1  /* output rows one workgroup computes */
#define COLI_GEMV_SPEC_ID_X_TILE 2              /* floats of x staged in shared memory (shmem_x) */

// Defaults compiled into the modules (used when no value is specialised).
#define COLI_GEMV_DEFAULT_WORKGROUP_SIZE 128
#define COLI_GEMV_DEFAULT_ROWS_PER_WORKGROUP 8
#define COLI_GEMV_DEFAULT_X_TILE 4096

// shmem_x: X_TILE is a power of two in [MIN, MAX]; 64 keeps q4 groups (and
// q8 words) whole inside one tile.
#define COLI_GEMV_MIN_X_TILE 64
#define COLI_GEMV_MAX_X_TILE 16384

// tile64k: x staged in one fixed tile of 16384 floats = 65536 bytes.
#define COLI_GEMV_TILE64K_X_TILE 16384

// Bytes per element of the shared arrays (float).
#define COLI_GEMV_SHARED_FLOAT_BYTES 4

#endif
