/*
 * webhook — POSTing a JSON document to a user's URL from the daemon: a
 * label step's task (steps/label.c), a run's completion
 * (FERRY_NOTIFY_WEBHOOK). Each try is bounded (2 s to connect, 5 s in all),
 * tries back off (0.25 s, 0.5 s, …), an answer is read up to 64 KiB, and a
 * 4xx other than 408/429 is not tried again: the receiver refused the
 * document. Called on the engine's worker threads, never on its loop.
 */
#include "lib/webhook.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lib/util.h"

#define WEBHOOK_BODY_MAX (64 * 1024)

static size_t body_write(char *p, size_t size, size_t n, void *ud)
{
	FILE *b = ud;
	size_t len = size * n;

	if (ftell(b) + (long)len > WEBHOOK_BODY_MAX)
		return 0;
	return fwrite(p, 1, len, b);
}

int webhook_post(json_t **answer, const char *url, const json_t *body, int tries)
{
	char *payload = json_dumps(body, JSON_COMPACT), err[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	long code = 0;
	int error = FERRY_ERROR;

	int64_t deadline = clock_mono_ms() + WEBHOOK_BUDGET_MS;

	*answer = NULL;
	for (int t = 1; t <= tries; t++) {
		int64_t left = deadline - clock_mono_ms();
		char *buf = NULL;
		size_t blen = 0;
		FILE *b = open_memstream(&buf, &blen);
		CURL *c = curl_easy_init();
		CURLcode rc;

		if (b == NULL || c == NULL)
			abort();
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
		/* each try within what is left of the call's budget */
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(left < 2000 ? left : 2000));
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(left < 5000 ? left : 5000));
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_write);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
		curl_easy_setopt(c, CURLOPT_USERAGENT, "ferryd");
		rc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		curl_easy_cleanup(c);
		fclose(b);
		if (rc == CURLE_OK && code >= 200 && code < 300) {
			*answer = blen ? json_loadb(buf, blen, JSON_DECODE_ANY, NULL) : NULL;
			if (*answer == NULL && blen)
				*answer = json_stringn(buf, blen);
			free(buf);
			error = FERRY_OK;
			break;
		}
		free(buf);
		if (rc != CURLE_OK)
			ferry_error_set("webhook %s: %s (try %d of %d)", url, err[0] ? err : curl_easy_strerror(rc),
					t, tries);
		else
			ferry_error_set("webhook %s answered HTTP %ld (try %d of %d)", url, code, t, tries);
		flog_warn("%s", ferry_error_last());
		if (code >= 400 && code < 500 && code != 429 && code != 408)
			break; /* the hook refuses the task: trying again will not help */
		if (t < tries) {
			int64_t pause = 250 << (t - 1);
			if (deadline - clock_mono_ms() < pause + 100) {
				ferry_error_set("%s; the webhook's %d s budget is spent", ferry_error_last(),
						WEBHOOK_BUDGET_MS / 1000);
				break;
			}
			usleep((useconds_t)(pause * 1000));
		}
	}
	curl_slist_free_all(hdr);
	free(payload);
	return error;
}

