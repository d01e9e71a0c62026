# Ferry — build, install dependencies, test, demo, bench, fuzz.
#   make            build bin/ferryd, bin/ferry and bin/ferry-shim
#   make deps       install the Debian packages (apt-get; idempotent)
#   make check      banned functions, layers (tests/check-layers.sh), the README reference
#   make test       deps + check + build + unit, integration and browser tests
#   make demo       deps + build + embedded PostgreSQL + daemon + example pipeline
#   make bench      dispatch benchmark (JSON lines)
#   make fuzz       libFuzzer targets over the parsers (clang)
#   make install    PREFIX=/usr/local DESTDIR=: binaries, manual pages, the systemd unit
#   SANITIZE=address,undefined  builds everything with sanitizers

CC ?= cc
PG_INC := $(shell pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Werror
CFLAGS ?= -O2 -g
CFLAGS += -std=c11 -D_GNU_SOURCE $(WARN) -I. -Iorchestrator -I$(PG_INC) -MMD -MP
# Graphviz's dot layout and SVG renderer are linked in (dag_svg.c: no plugin loading, no fontconfig)
GV_PLUGINS := $(shell pkg-config --variable=libdir libgvc 2>/dev/null || echo /usr/lib/x86_64-linux-gnu)/graphviz
LDLIBS := -lpq -lyaml -ljansson -lmicrohttpd -lcurl -lcrypto -lgit2 -licui18n -licuuc -licudata \
	-L$(GV_PLUGINS) -Wl,-rpath,$(GV_PLUGINS) -lgvplugin_dot_layout -lgvplugin_core -lgvc -lcgraph -lpthread -lm

ifneq ($(SANITIZE),)
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
VARIANT := san
else
VARIANT := rel
endif
B := build/$(VARIANT)

ENGINE_SRC := $(filter-out orchestrator/daemon/%,$(wildcard orchestrator/*/*.c)) $(wildcard steps/*.c)
API_SRC := $(wildcard api/*.c)
CLI_SRC := $(wildcard cli/*.c)
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(B)/%.o) $(B)/db/migrations.o $(B)/db/functions.o \
	$(B)/deploy/haproxy_tmpl.o $(B)/orchestrator/exec/exec_warm_source.o
MIGRATIONS := $(sort $(wildcard db/migrations/*.sql))
FUNCTIONS := $(sort $(wildcard db/functions/*.sql))
UI_FILES := $(sort $(wildcard ui/*.html ui/*.js ui/*.css))
# browser-side libraries from npm (ui/package.json, pinned by its lock; make deps runs npm ci there):
# uPlot draws the console's charts
UI_VENDOR := ui/node_modules/uplot/dist/uPlot.iife.min.js ui/node_modules/uplot/dist/uPlot.min.css
API_OBJ := $(API_SRC:%.c=$(B)/%.o) $(B)/api/openapi.o $(B)/api/ui_assets.o
CLI_OBJ := $(CLI_SRC:%.c=$(B)/%.o)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
# the benchmarks' binaries (make bench): make test builds them too, so one that no longer compiles is caught
BENCH_BIN := $(patsubst tests/bench/%.c,$(B)/tests/%,$(wildcard tests/bench/*.c))

DEB_BUILD := gcc make pkg-config libpq-dev libcurl4-openssl-dev libmicrohttpd-dev \
	libyaml-dev libjansson-dev libssl-dev libcmocka-dev libicu-dev libgit2-dev libgraphviz-dev musl-tools
DEB_RUN := postgresql postgresql-client curl procps jq python3 python3-sklearn wrk \
	podman runc busybox-static tini \
	slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge \
	docker.io haproxy elfutils gdb python3-dbg git chromium nodejs help2man prometheus python3-jsonschema

.PHONY: all deps check test unit integration demo bench fuzz clean variant install

all: bin/ferryd bin/ferry bin/ferry-shim

# Relink when switching between plain and sanitized builds.
build/variant: variant
	@mkdir -p build
	@echo "$(VARIANT) $(CFLAGS)" | cmp -s - $@ || echo "$(VARIANT) $(CFLAGS)" > $@

bin/ferryd: $(B)/orchestrator/daemon/ferryd.o $(API_OBJ) $(ENGINE_OBJ) build/variant
	@mkdir -p bin
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

# the crash tests' daemon: ferryd plus tests/fault (fault injection, the test executor type)
bin/ferryd-test: $(B)/orchestrator/daemon/ferryd.o $(B)/tests/fault/fault.o $(API_OBJ) $(ENGINE_OBJ) build/variant
	@mkdir -p bin
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

bin/ferry: $(CLI_OBJ) $(ENGINE_OBJ) build/variant
	@mkdir -p bin
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

# the local executor's supervisor of a job (orchestrator/daemon/ferry_shim.c), spawned beside
# ferryd: static, as it starts with the job's environment (no dynamic loader to obey LD_PRELOAD),
# never sanitized (the sanitizers' runtimes are not static), its few objects built apart and
# what they do not call dropped (util.c's digests and logmask.c's JSON are not linked).
# Built with musl where musl-gcc is installed (Debian's musl-tools, make deps): every local job
# starts one, and a static glibc program's start-up (IRELATIVE relocations, 26 pages touched)
# made it 450 us here against 230 us for musl's (tests/bench: chain); else with $(CC). Its
# sources include libc's headers and the project's, nothing else (musl-gcc sees no other).
SHIM_CC := $(or $(shell command -v musl-gcc 2>/dev/null),$(CC))
SHIM_DIR := build/shim$(if $(findstring musl,$(SHIM_CC)),-musl)
SHIM_SRC := orchestrator/daemon/ferry_shim.c orchestrator/exec/exec_shim.c orchestrator/exec/logmask.c \
	orchestrator/lib/util.c
SHIM_CFLAGS = $(filter-out -fsanitize=% -fno-sanitize-recover=% -I$(PG_INC),$(CFLAGS)) -ffunction-sections -fdata-sections
$(SHIM_DIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(SHIM_CC) $(SHIM_CFLAGS) -c -o $@ $<

# relink when the shim's compiler changes (musl-gcc installed or removed)
build/shim-cc: variant
	@mkdir -p build
	@echo "$(SHIM_CC)" | cmp -s - $@ || echo "$(SHIM_CC)" > $@

bin/ferry-shim: $(SHIM_SRC:%.c=$(SHIM_DIR)/%.o) build/shim-cc
	@mkdir -p bin
	$(SHIM_CC) -static -Wl,--gc-sections -o $@ $(filter %.o,$^)

# The directories are prerequisites too, so adding or removing a file regenerates.
$(B)/db/migrations.c: $(MIGRATIONS) db/migrations db/gen-sql.sh
	@mkdir -p $(dir $@)
	db/gen-sql.sh migration $(MIGRATIONS) > $@

$(B)/db/functions.c: $(FUNCTIONS) db/functions db/gen-sql.sh
	@mkdir -p $(dir $@)
	db/gen-sql.sh function $(FUNCTIONS) > $@

$(B)/api/openapi.c: api/openapi.json api/gen-openapi.sh
	@mkdir -p $(dir $@)
	api/gen-openapi.sh api/openapi.json > $@

$(B)/api/openapi.o: $(B)/api/openapi.c
	$(CC) $(CFLAGS) -c -o $@ $<

# the console (ui/), built into ferryd and served at /ui/; the directory is a prerequisite: a file added or removed regenerates
$(B)/api/ui_assets.c: $(UI_FILES) $(UI_VENDOR) ui api/gen-ui.sh
	@mkdir -p $(dir $@)
	api/gen-ui.sh $(UI_FILES) $(UI_VENDOR) > $@

$(UI_VENDOR):
	@echo "ui/node_modules: the console's libraries are missing; run make deps (npm ci in ui/)" >&2; exit 1

$(B)/api/ui_assets.o: $(B)/api/ui_assets.c
	$(CC) $(CFLAGS) -c -o $@ $<

# the HAProxy template built into ferryd (FERRY_HAPROXY_TEMPLATE overrides it)
$(B)/deploy/haproxy_tmpl.c: deploy/haproxy.cfg.tmpl
	@mkdir -p $(dir $@)
	{ echo '/* generated from deploy/haproxy.cfg.tmpl by the Makefile; do not edit */'; \
	  echo '#include "deploy/haproxy.h"'; echo 'const char hap_template_builtin[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/\t"/' -e 's/$$/\\n"/' $<; echo ';'; } > $@

$(B)/deploy/haproxy_tmpl.o: $(B)/deploy/haproxy_tmpl.c
	$(CC) $(CFLAGS) -c -o $@ $<

# the warm Python server (orchestrator/exec/exec_warm.c) built into ferryd, run as `python -c SOURCE`
$(B)/orchestrator/exec/exec_warm_source.c: orchestrator/exec/exec_warm_server.py
	@mkdir -p $(dir $@)
	{ echo '/* generated from orchestrator/exec/exec_warm_server.py by the Makefile; do not edit */'; \
	  echo 'extern const char warm_server_source[];'; echo 'const char warm_server_source[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/\t"/' -e 's/$$/\\n"/' $<; echo ';'; } > $@

$(B)/orchestrator/exec/exec_warm_source.o: $(B)/orchestrator/exec/exec_warm_source.c
	$(CC) $(CFLAGS) -c -o $@ $<

$(B)/db/migrations.o $(B)/db/functions.o: $(B)/db/%.o: $(B)/db/%.c
	$(CC) $(CFLAGS) -c -o $@ $<

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# the tests' and benchmarks' binaries link the objects from one archive: the linker takes only
# those a test needs (a unit test linked all ~170 with their debug information: 0.25 s of CPU
# more each, 47 of them in every make test, and 4.4 MB binaries where 0.2 MB do)
$(B)/libferry.a: $(ENGINE_OBJ) $(API_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(B)/tests/test_%: tests/unit/test_%.c $(B)/libferry.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libferry.a -lcmocka $(LDLIBS)

$(B)/tests/bench_dispatch: tests/bench/bench_dispatch.c $(B)/libferry.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libferry.a $(LDLIBS)

$(B)/tests/quote_oracle: tests/fuzz/quote_oracle.c $(B)/libferry.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libferry.a $(LDLIBS)

$(B)/tests/bench_fingerprint: tests/bench/bench_fingerprint.c $(B)/libferry.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libferry.a $(LDLIBS)

$(B)/tests/bench_haproxy: tests/bench/bench_haproxy.c $(B)/libferry.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libferry.a $(LDLIBS)

# the integration suite's server of `sql` and `api` calls (tests/integration/suite_calls.c)
$(B)/tests/suite_calls: tests/integration/suite_calls.c $(B)/orchestrator/lib/util.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -pthread -o $@ $^ -lpq -lcurl -lcrypto

# make && make install PREFIX=/usr/local DESTDIR=: the binaries, their manual pages
# (help2man, from --help), the systemd unit (User=ferry) and the docs; as root
# with no DESTDIR, the system user ferry and /var/lib/ferry too
PREFIX ?= /usr/local
DESTDIR ?=
install:
	@# what `make` built, as it is (never rebuilt here: a test installs beside the suite's binaries)
	@test -x bin/ferryd -a -x bin/ferry -a -x bin/ferry-shim || { echo "install: bin/ferryd, bin/ferry or bin/ferry-shim is missing: run make first" >&2; exit 1; }
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/systemd/system \
		$(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/share/doc/ferry
	install -m 0755 bin/ferryd bin/ferry bin/ferry-shim $(DESTDIR)$(PREFIX)/bin/
	sed 's|@PREFIX@|$(PREFIX)|g' deploy/ferryd.service >$(DESTDIR)$(PREFIX)/lib/systemd/system/ferryd.service
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/ferryd.service
	help2man --no-info --section 8 --name "Ferry's daemon: ML workflows, their jobs and deployments" \
		bin/ferryd | gzip -9n >$(DESTDIR)$(PREFIX)/share/man/man8/ferryd.8.gz
	help2man --no-info --section 1 --name "Ferry's command-line client" \
		bin/ferry | gzip -9n >$(DESTDIR)$(PREFIX)/share/man/man1/ferry.1.gz
	install -m 0644 README.md deploy/CONFIG.md deploy/haproxy.cfg.tmpl $(DESTDIR)$(PREFIX)/share/doc/ferry/
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then deploy/install-user.sh ferry /var/lib/ferry; fi

deps:
	@missing=$$(for p in $(DEB_BUILD) $(DEB_RUN); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "deps: installing$$(echo $$missing | sed 's/^/ /')"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "deps: all installed"; fi
	@# the unprivileged user jobs run as when ferryd runs as root (orchestrator/exec/exec_user.c)
	@if [ "$$(id -u)" = 0 ] && ! getent passwd ferry-job >/dev/null; then \
		echo "deps: adding the system user ferry-job (FERRY_JOB_USER)"; \
		useradd --system --user-group --home-dir /var/lib/ferry-job --create-home \
			--shell /usr/sbin/nologin ferry-job; \
	fi
	@# the browser tests' driver (tests/browser), the OpenAPI lint (tests/api) and the console's
	@# charting library (ui: uPlot, built into ferryd): npm ci when
	@# node_modules is missing or older than the lock file
	@for d in tests/browser tests/api ui; do \
		if [ ! -f $$d/node_modules/.package-lock.json ] || [ $$d/package-lock.json -nt $$d/node_modules/.package-lock.json ]; then \
			echo "deps: npm ci in $$d"; \
			command -v npm >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm; \
			(cd $$d && npm ci --no-audit --no-fund --loglevel=error) || exit 1; \
		fi; \
	done

# what STYLE promises, checked before any test: banned functions, the layers
# (tests/check-layers.sh), the OpenAPI document's lint (tests/api/lint.sh,
# Redocly's lint engine), the README's workflow reference, and (when the
# duplicates tool is installed) the places the tree repeats itself, as information
check: $(B)/tests/test_readme
	@tests/check-banned.sh
	@tests/check-layers.sh
	@tests/api/lint.sh
	@$(B)/tests/test_readme >/dev/null 2>&1 && echo "check-readme: clean" || { $(B)/tests/test_readme; exit 1; }
	@if command -v duplicates >/dev/null; then duplicates --most 1 | head -1 | sed 's/^/duplicates (information): /'; fi

unit: all $(UNIT_BIN)
	@tests/run-unit.sh $(UNIT_BIN)

integration: all bin/ferryd-test $(B)/tests/suite_calls
	@tests/integration/run.sh

test: deps
	@$(MAKE) --no-print-directory -j$$(nproc) check
	@$(MAKE) --no-print-directory -j$$(nproc) all bin/ferryd-test $(UNIT_BIN) $(BENCH_BIN) $(B)/tests/suite_calls
	@tests/run-all.sh $(UNIT_BIN)

demo: deps
	@$(MAKE) --no-print-directory all
	@deploy/demo.sh

bench: deps
	@$(MAKE) --no-print-directory all
	@tests/bench/run.sh

fuzz:
	@$(MAKE) --no-print-directory deps DEB_RUN="clang libclang-rt-14-dev $(DEB_RUN)"
	@tests/fuzz/run.sh
	@# the shell quoting of templates against dash and bash (tests/fuzz/quote_oracle.c)
	@$(MAKE) --no-print-directory $(B)/tests/quote_oracle
	@$(B)/tests/quote_oracle --execs $${QUOTE_EXECS:-1000000} --seed $${QUOTE_SEED:-$$(date +%s)}
	@# haproxy's runtime changes against its config, 2,000 random steps (make test runs 120)
	@$(MAKE) --no-print-directory $(B)/tests/test_haproxy
	@HAP_RANDOM_STEPS=$${HAP_RANDOM_STEPS:-2000} $(B)/tests/test_haproxy --only '*random_changes'
	@# deployments: 1,000 random changes, HAProxy against the database after each (make test runs 150)
	@DEPLOY_CHANGES=$${DEPLOY_CHANGES:-1000} tests/integration/run.sh test_deploy_random_changes_agree_with_haproxy
	@# the request fuzzer: generated hostile requests against a sanitized daemon
	@$(MAKE) --no-print-directory SANITIZE=address,undefined all bin/ferryd-test
	@tests/integration/run.sh test_hostile_requests
	@$(MAKE) --no-print-directory all

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
