/*
 * registry — the register step kind and the content-addressed artifact
 * store under $FERRY_HOME/artifacts (see registry.c for the layout).
 */
#ifndef FERRY_REGISTRY_H
#define FERRY_REGISTRY_H

#include <stdint.h>

#include "steps/steps.h"

/* A stored artifact. path is owned: registry_artifact_dispose(). */
struct registry_artifact {
	char sha256[65];   /* of the file, or of a directory's manifest */
	const char *kind;  /* "file" or "tree" */
	int64_t bytes;     /* the file's size, or the sum of the directory's files */
	char *path;        /* the blob (or the manifest blob) */
	json_t *blobs;     /* every blob it is made of (the manifest's and its files'), hex strings */
};

/*
 * Stores the file or directory src in home's blob store (the same bytes are
 * stored once). FERRY_ENOTFOUND when src does not exist.
 */
int registry_artifact_put(struct registry_artifact *out, const char *home, const char *src);
void registry_artifact_dispose(struct registry_artifact *a);

/* Records this host as a holder of every blob of a (so other hosts fetch them from here). */
int registry_artifact_held(PGconn *conn, const struct registry_artifact *a);

/*
 * The register step: stores its artifact and registers a version of its
 * model with lineage; fills res (succeeded, outputs model, version, sha256,
 * artifact, bytes, kind, created). Negative with the message set on failure.
 */
int registry_step(const struct step_run *r, struct step_result *res);

#endif
