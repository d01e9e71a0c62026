/*
 * webhook — POST a JSON document to a URL with bounded tries (webhook.c).
 */
#ifndef FERRY_WEBHOOK_H
#define FERRY_WEBHOOK_H

#include <jansson.h>

/* The tries a label task and a completion get, and the time all of them together may take. */
#define WEBHOOK_TRIES 3
#define WEBHOOK_BUDGET_MS 8000

/*
 * POSTs body to url (http or https) up to tries times, all within
 * WEBHOOK_BUDGET_MS (each try gets what is left); 0 with *answer its
 * JSON answer (a string when it is not JSON; NULL when empty; the caller's),
 * or FERRY_ERROR with the message set (the last try's failure).
 */
int webhook_post(json_t **answer, const char *url, const json_t *body, int tries);

#endif
