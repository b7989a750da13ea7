/* test_device.c: prints what tgc_device_query (allocator/device.c) says about CUDA ordinal 0 as
 * key=value lines, for a person or a test to read. Exits 0 with or without a GPU or driver: with
 * none it prints ok=0 and the error. Exits 1 only when the answer contradicts the contract. */
#include "tensorgc/device.h"

#include <stdio.h>

int
main(void)
{
    tgc_device_mem m;
    int count = tgc_device_count();
    int rc = tgc_device_query(0, &m);
    /* The return value and ok must agree, and a failure must say why. */
    int consistent = (rc == 0) == (m.ok == 1) && (rc == 0 || m.error[0] != '\0');

    printf("count=%d\n", count);
    printf("ok=%d\n", m.ok);
    printf("ordinal=%d\n", m.ordinal);
    printf("name=%s\n", m.name);
    printf("total=%llu\n", m.total);
    printf("free=%lld\n", m.free);
    printf("process_used=%lld\n", m.process_used);
    printf("device_used=%lld\n", m.device_used);
    printf("nvml=%d\n", m.nvml);
    printf("source=%s\n", m.source);
    printf("error=%s\n", m.error);
    return consistent ? 0 : 1;
}
