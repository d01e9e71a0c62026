/*
 * fingerprint — the content fingerprint of a file or directory (sha256,
 * lowercase hex) and the sorted tree of a directory it is computed from,
 * with a stat memo in this process (fingerprint.c). Users: the `cache`
 * step kind (steps/datacache.c: the entry key, and the tree it copies),
 * the registry and labels (the dataset's fingerprint), data triggers
 * (schedule/triggers.c: a changed file's content).
 */
#ifndef FERRY_FINGERPRINT_H
#define FERRY_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* One entry of a tree: a directory, regular file or symbolic link. */
struct fingerprint_ent {
	char *rel;  /* path relative to the root */
	char type;  /* 'd', 'f' or 'l' */
	mode_t mode;
	int64_t size;
	char *link; /* a link's target text */
	/* what the stat memo compares (fingerprint.c) */
	uint64_t dev, ino;
	int64_t mtime_ns, ctime_ns;
};

/* The entries below a directory, sorted by rel; fingerprint_tree_dispose frees them. */
struct fingerprint_tree {
	struct fingerprint_ent *v;
	size_t n, cap;
	int64_t bytes; /* of the regular files */
	int64_t files;
};

/*
 * The sorted tree below dir (a directory, followed if it is itself a link;
 * links below it are not followed), into *t, and *rootfd an open
 * descriptor of dir, both the caller's (fingerprint_tree_dispose, close).
 * FERRY_ENOTFOUND when dir does not exist, FERRY_ERROR when it cannot be
 * read (nested deeper than 64 levels, more than 5,000,000 entries).
 */
int fingerprint_tree_load(struct fingerprint_tree *t, int *rootfd, const char *dir);
/* Adds an entry of type ('d', 'f', 'l') with st's metadata; takes rel over. */
struct fingerprint_ent *fingerprint_tree_add(struct fingerprint_tree *t, char *rel, char type,
					     const struct stat *st);
/* Frees the entries and zeroes *t. */
void fingerprint_tree_dispose(struct fingerprint_tree *t);

/*
 * out: lowercase hex sha256 of path by content. A regular file: its bytes.
 * A directory: its tree — every entry's path relative to it (sorted
 * bytewise, so readdir order does not matter), its type, and a file's size
 * and bytes, a symbolic link's target text (links are never followed),
 * a directory's name; other file types are ignored. FERRY_ENOTFOUND when
 * path does not exist, FERRY_ERROR when it cannot be read. A path whose
 * files' metadata (size, inode, mtime, ctime) is unchanged since its last
 * fingerprint in this process is not read again (see the stat memo in
 * fingerprint.c).
 */
int fingerprint_path(char out[65], const char *path);

/*
 * The wall clock in nanoseconds, for fingerprint_of's since: taken before
 * anything is read (the stat memo does not remember a path changed less
 * than two seconds before it).
 */
int64_t fingerprint_clock_ns(void);

/*
 * fingerprint_path of an already examined path, through the stat memo: st
 * is its stat and, for a directory, t its loaded tree below rootfd (else
 * t and rootfd are not used); since is fingerprint_clock_ns() from before
 * either was taken.
 */
int fingerprint_of(char out[65], const char *path, const struct stat *st, const struct fingerprint_tree *t,
		   int rootfd, int64_t since);

#endif
