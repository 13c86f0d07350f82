/* pack.h — `dsgd-run --pack SRC OUT`: an ImageFolder tree of ImageNet-style images packed into
 * a few large HDF5 shards of re-encoded JPEGs (src/data/shards.h; docs/data.md "Packing";
 * issue 11 item 1; notes/imagenet.md §5.1).
 *
 *   dsgd-run --pack SRC OUT [--max-side 480] [--quality 90] [--threads N]
 *            [--shard-images 10000 | --shards K] [--val-labels FILE] [--seed 1] [--overwrite]
 *
 * SRC/train/<wnid>/<file>: class index = position of <wnid> among the sorted train folders
 * (torchvision, TF, MXNet). SRC/val/<wnid>/<file> (every wnid a train class), or a flat
 * SRC/val/<file> with labels from --val-labels, SRC/val_labels.txt ("<file> <wnid>" lines) or
 * SRC/LOC_val_solution.csv (Kaggle: "ImageId,PredictionString", the first token of which is the
 * wnid). Each image is opened by content (JPEG by its SOI marker, PNG by its signature; anything
 * else is named and skipped), converted to RGB (grayscale replicated, CMYK/YCCK taken as Adobe-
 * inverted like Pillow, palette expanded, alpha dropped), shrunk so that its largest side is at
 * most --max-side (never enlarged; DCT-domain scaling while the decoded image stays at least
 * twice the target per side, then Pillow's antialiased bicubic), and re-encoded as baseline JPEG
 * 4:2:0 at --quality. The samples of a split are spread over its shards by a permutation drawn
 * from --seed: the same SRC, options and seed give byte-identical shards whatever the number of
 * ranks and threads.
 *
 * Under mpiexec/srun, rank r of R writes the shards k ≡ r (mod R); rank 0 lists SRC, prepares
 * OUT and, once every rank is done, writes OUT/index.h5. Exit status: 0 packed (images that
 * could not be decoded are named on stderr, counted and stored as skipped); 2 bad input (options,
 * SRC layout, labels, an existing OUT without --overwrite) on every rank, nothing written; 1 a
 * write or system failure. */
#ifndef DSGD_PACK_H
#define DSGD_PACK_H

/* 1 if argv asks for --pack (main dispatches to pack_main before anything else). */
int pack_requested(int argc, char **argv);

/* The whole of `dsgd-run --pack ...` after comm_init (every rank calls it); returns the exit
 * status. Prints errors and progress on stderr. */
int pack_main(int argc, char **argv);

#endif
