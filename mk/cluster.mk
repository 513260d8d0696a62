# mk/cluster.mk: the test driver of the Redis Cluster routing (src/cluster/).
#
#   $(BUILD)/cluster-tests/cluster_driver   built by `make units`; run by
#                                           tests/integration/test_redis_cluster.py,
#                                           which starts a local cluster for it

CLUSTER_DRIVER := $(BUILD)/cluster-tests/cluster_driver

units: $(CLUSTER_DRIVER)

$(CLUSTER_DRIVER): tests/cluster/cluster_driver.c $(BUILD)/libhfmetad.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libhfmetad.a $(LDLIBS)
