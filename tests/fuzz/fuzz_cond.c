/*
 * libFuzzer target for plan/cond (the `when:` condition language): the
 * bytes are a condition for cond_parse; whatever parses is evaluated three
 * times — against a lookup that answers every reference from the bytes'
 * own values (numbers, strings, booleans, null, lists), one that says
 * nothing is there (and no production version), and one that fails — so
 * ASan/LSan/UBSan see the parser, every operator and every error path.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "plan/cond.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int mode;

static int lookup(json_t **val, char **why, const struct cond_ref *ref, void *arg)
{
	size_t h = strlen(ref->text) + strlen(ref->key) + (size_t)ref->col + (ref->step ? strlen(ref->step) : 0);

	(void)arg;
	if (mode == 1) {
		*why = xstrdup("not there");
		return 1;
	}
	if (mode == 2) {
		ferry_error_set("the lookup failed");
		return FERRY_EDB;
	}
	switch (h % 7) {
	case 0: *val = json_real((double)(h % 13) / 4 - 1); break;
	case 1: *val = json_string(ref->key); break;
	case 2: *val = json_boolean(h % 2); break;
	case 3: *val = json_null(); break;
	case 4: *val = json_pack("[i]", (int)h); break;
	case 5: *val = json_string("12.5"); break;
	default: *why = xstrdup("absent"); return 1;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = xstrndup((const char *)data, size);
	struct cond *c = NULL;

	if (cond_parse(&c, text) == 0) {
		for (mode = 0; mode < 3; mode++) {
			bool holds;
			char *explain = NULL;
			(void)cond_eval(c, lookup, NULL, &holds, &explain);
			free(explain);
		}
		for (size_t i = 0; i < cond_nrefs(c); i++)
			(void)cond_ref_at(c, i)->text;
		cond_free(c);
	}
	free(text);
	return 0;
}
