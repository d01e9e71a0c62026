/*
 * Unit tests for what a daemon says its host offers (engine/host.c): the
 * cgroup v2 limits, /proc/meminfo, FERRY_HOST_LABELS and FERRY_RESOURCES
 * pairs, the FERRY_GPUS list, and the capacity detected from settings.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/host.h"
#include "lib/util.h"

static void test_host__cgroup_and_meminfo(void **state)
{
	(void)state;
	assert_true(host_parse_cpu_max("150000 100000\n") == 1.5);
	assert_true(host_parse_cpu_max("max 100000\n") == -1);
	assert_true(host_parse_cpu_max("100000") == -1);
	assert_true(host_parse_cpu_max("0 100000") == -1);
	assert_true(host_parse_cpu_max("abc 100000") == -1);
	assert_true(host_parse_cpu_max(NULL) == -1);
	assert_int_equal(host_parse_memory_max("1073741824\n"), 1073741824);
	assert_int_equal(host_parse_memory_max("max\n"), -1);
	assert_int_equal(host_parse_memory_max("12abc"), -1);
	assert_int_equal(host_parse_memory_max(""), -1);
	assert_int_equal(host_parse_meminfo("MemTotal:       16384 kB\nMemFree: 1 kB\n"), 16384 * 1024LL);
	assert_int_equal(host_parse_meminfo("MemFree: 1 kB\n"), -1);
}

static void test_host__pairs(void **state)
{
	json_t *o = NULL;

	(void)state;
	assert_int_equal(host_parse_pairs(&o, " gpu = true , zone=eu-1,", 0, "FERRY_HOST_LABELS"), 0);
	assert_string_equal(json_string_value(json_object_get(o, "gpu")), "true");
	assert_string_equal(json_string_value(json_object_get(o, "zone")), "eu-1");
	assert_int_equal(json_object_size(o), 2);
	json_decref(o);
	assert_int_equal(host_parse_pairs(&o, NULL, 0, "L"), 0);
	assert_int_equal(json_object_size(o), 0);
	json_decref(o);
	assert_int_equal(host_parse_pairs(&o, "license=2,fpga=0", 1, "FERRY_RESOURCES"), 0);
	assert_int_equal(json_integer_value(json_object_get(o, "license")), 2);
	assert_int_equal(json_integer_value(json_object_get(o, "fpga")), 0);
	json_decref(o);

	assert_int_equal(host_parse_pairs(&o, "gpu", 0, "FERRY_HOST_LABELS"), FERRY_EINVALID);
	assert_null(o);
	assert_string_equal(ferry_error_last(), "FERRY_HOST_LABELS: \"gpu\" is not NAME=VALUE");
	assert_int_equal(host_parse_pairs(&o, "a b=1", 0, "L"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "\"a b\" is not a name"));
	assert_int_equal(host_parse_pairs(&o, "a=1,a=2", 0, "L"), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "L: a is given twice");
	assert_int_equal(host_parse_pairs(&o, "license=two", 1, "FERRY_RESOURCES"), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "FERRY_RESOURCES: license=two is not a whole number of 0 or more");
	assert_int_equal(host_parse_pairs(&o, "license=-1", 1, "FERRY_RESOURCES"), FERRY_EINVALID);
}

static void test_host__gpus(void **state)
{
	json_t *g = NULL;

	(void)state;
	assert_int_equal(host_parse_gpus(&g, "0, 1,3"), 0);
	assert_int_equal(json_array_size(g), 3);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(g, 2), "index")), 3);
	assert_null(json_object_get(json_array_get(g, 0), "uuid"));
	json_decref(g);
	assert_int_equal(host_parse_gpus(&g, "GPU-8f2a1c3e-aaaa-bbbb-cccc-0123456789ab,GPU-00000000-1111-2222-3333-444444444444"), 0);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(g, 1), "index")), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(g, 0), "uuid")),
			    "GPU-8f2a1c3e-aaaa-bbbb-cccc-0123456789ab");
	json_decref(g);
	assert_int_equal(host_parse_gpus(&g, "none"), 0);
	assert_int_equal(json_array_size(g), 0);
	json_decref(g);
	assert_int_equal(host_parse_gpus(&g, ""), 0);
	assert_int_equal(json_array_size(g), 0);
	json_decref(g);
	assert_int_equal(host_parse_gpus(&g, "0,gpu1"), FERRY_EINVALID);
	assert_null(g);
	assert_non_null(strstr(ferry_error_last(), "FERRY_GPUS: \"gpu1\" is neither a GPU index nor a GPU UUID"));
	assert_int_equal(host_parse_gpus(&g, "0,1,0"), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "FERRY_GPUS: 0 is listed twice");
	assert_int_equal(host_parse_gpus(&g, "GPU-aa, GPU-bb, GPU-aa"), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "FERRY_GPUS: GPU-aa is listed twice");
}

/* the capacity from the settings: declared GPUs (nvidia-smi not asked), resources, labels; a bad one refused */
static void test_host__detect(void **state)
{
	json_t *cap = NULL, *labels = NULL;

	(void)state;
	setenv("FERRY_GPUS", "0,1", 1);
	setenv("FERRY_RESOURCES", "license=2", 1);
	setenv("FERRY_HOST_LABELS", "gpu=true", 1);
	setenv("FERRY_NVIDIA_SMI", "/nonexistent/nvidia-smi", 1);
	assert_int_equal(host_detect(&cap, &labels), 0);
	assert_int_equal(json_array_size(json_object_get(cap, "gpus")), 2);
	assert_true(json_number_value(json_object_get(cap, "cpus")) >= 1);
	assert_true(json_integer_value(json_object_get(cap, "memory_bytes")) > 0);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(cap, "resources"), "license")), 2);
	assert_string_equal(json_string_value(json_object_get(labels, "gpu")), "true");
	json_decref(cap), json_decref(labels);
	unsetenv("FERRY_GPUS"); /* nvidia-smi that does not exist: no GPU, no error */
	assert_int_equal(host_detect(&cap, &labels), 0);
	assert_int_equal(json_array_size(json_object_get(cap, "gpus")), 0);
	json_decref(cap), json_decref(labels);
	setenv("FERRY_HOST_LABELS", "gpu", 1);
	assert_int_equal(host_detect(&cap, &labels), FERRY_EINVALID);
	assert_null(cap);
	assert_null(labels);
	unsetenv("FERRY_HOST_LABELS"), unsetenv("FERRY_RESOURCES"), unsetenv("FERRY_NVIDIA_SMI");
}

/* a job's GPUs by UUID where known, else by index in PCI order; none visible when given none on a GPU host */
static void test_host__gpu_env(void **state)
{
	json_t *uuids = json_loads("[{\"index\":0,\"uuid\":\"GPU-a\"},{\"index\":1,\"uuid\":\"GPU-b\"}]", 0, NULL);
	json_t *plain = json_loads("[{\"index\":0},{\"index\":1}]", 0, NULL), *spec = json_pack("{s:s}", "X", "1"), *env;

	(void)state;
	{
		json_t *none = json_array();
		assert_null(host_gpu_env(none, NULL, spec));
		json_decref(none);
	}
	env = host_gpu_env(uuids, "1", spec);
	assert_string_equal(json_string_value(json_object_get(env, "CUDA_VISIBLE_DEVICES")), "GPU-b");
	assert_string_equal(json_string_value(json_object_get(env, "FERRY_GPUS")), "1");
	assert_string_equal(json_string_value(json_object_get(env, "X")), "1");
	assert_null(json_object_get(env, "CUDA_DEVICE_ORDER"));
	json_decref(env);
	env = host_gpu_env(plain, "0,1", NULL);
	assert_string_equal(json_string_value(json_object_get(env, "CUDA_VISIBLE_DEVICES")), "0,1");
	assert_string_equal(json_string_value(json_object_get(env, "CUDA_DEVICE_ORDER")), "PCI_BUS_ID");
	json_decref(env);
	env = host_gpu_env(plain, NULL, NULL);
	assert_string_equal(json_string_value(json_object_get(env, "CUDA_VISIBLE_DEVICES")), "");
	assert_string_equal(json_string_value(json_object_get(env, "NVIDIA_VISIBLE_DEVICES")), "void");
	json_decref(env);
	json_decref(uuids), json_decref(plain), json_decref(spec);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host__cgroup_and_meminfo),
		cmocka_unit_test(test_host__pairs),
		cmocka_unit_test(test_host__gpus),
		cmocka_unit_test(test_host__detect),
		cmocka_unit_test(test_host__gpu_env),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
