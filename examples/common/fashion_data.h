/*
 * fashion_data.h — what the Fashion-MNIST examples share (fashion_mnist.c,
 * the MLP main job, and fashion_cnn.c): the IDX loader of Debian's
 * dataset-fashion-mnist files (gzip, read with zlib), the shuffle, the
 * clock and the profile report.
 */
#ifndef KILN_FASHION_DATA_H
#define KILN_FASHION_DATA_H

#include <stdbool.h>
#include <stdint.h>

#define FASHION_IMG 784 /* 28 x 28 pixels */
#define FASHION_CLASSES 10
#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

typedef struct dataset {
  int64_t n;
  float *images;   /* [n, 784], scaled to [0, 1] */
  int64_t *labels; /* [n], 0..9 */
} dataset;

/* Loads <dir>/<prefix>-images-idx3-ubyte.gz and -labels-idx1-ubyte.gz
 * (prefix "train" or "t10k"), checking headers, sizes and labels; false
 * with a message on stderr naming `prog`. */
bool fashion_load(const char *prog, const char *dir, const char *prefix, dataset *ds);
void fashion_free(dataset *ds);

/* Mean and standard deviation (population, over every pixel of every
 * image) of ds's images, in double. */
void fashion_pixel_moments(const dataset *ds, double *mean, double *std);

/* images = (images - mean) / std, in place (std > 0): what
 * torchvision's Normalize((mean,), (std,)) does to each image. */
void fashion_standardize(dataset *ds, double mean, double std);

/* splitmix64 step; Fisher-Yates shuffle of perm [n] with it. */
uint64_t fashion_rng_next(uint64_t *s);
void fashion_shuffle(int64_t *perm, int64_t n, uint64_t *rng);

/* Monotonic seconds. */
double fashion_seconds(void);

/* Compiles (cache misses) among the profiler's records. */
int fashion_count_compiles(void);

/* --stats: one line of kiln_engine_stats_get after epoch e, in a form
 * scripts/soak.sh reads ("stats: epoch E rss_mib R live_nodes N ..."). */
void fashion_print_stats(int epoch);

/* Prints the profile table of the records (the last epoch); writes them
 * as a Chrome trace to `trace` too when not NULL. Returns a kiln_status. */
int fashion_report_profile(const char *prog, const char *trace);

#endif /* KILN_FASHION_DATA_H */
