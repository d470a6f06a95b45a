/* A libfabric application that opens a droce domain, closes it and returns from main. At exit
 * libfabric's destructor dlclose()s its providers while droce's host threads (the ACK watchdog,
 * a progress thread) still run: the provider must stay mapped (it pins itself, RTLD_NODELETE).
 * Run with DROCE_EAL="-d <slow_fini.so>" (tests/fabric/slow_fini.c): EAL loads that plugin
 * like a PMD, so its destructor runs after libfabric's and keeps the process alive 50 ms with the
 * threads ticking. Exit status 0 and "exit_app: closed" unless something failed or crashed.
 * EXIT_APP_HOLD_MS=<ms>: hold the domain open that long first ("exit_app: opened" on stdout),
 * a process on the zero-config mesh that only holds its links (tests/fabric.rs kills it).
 * Build: cc exit_app.c -lfabric */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

int main(void)
{
    struct fi_info *hints = fi_allocinfo(), *info = NULL;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    hints->ep_attr->type = FI_EP_MSG;
    hints->caps = FI_MSG;
    hints->fabric_attr->prov_name = strdup("droce");
    int r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
    if (r) {
        fprintf(stderr, "fi_getinfo: %s\n", fi_strerror(-r));
        return 2;
    }
    if ((r = fi_fabric(info->fabric_attr, &fab, NULL)) || (r = fi_domain(fab, info, &dom, NULL))) {
        fprintf(stderr, "fi_fabric/fi_domain: %s\n", fi_strerror(-r));
        return 2;
    }
    const char *hold = getenv("EXIT_APP_HOLD_MS");
    if (hold) {
        printf("exit_app: opened\n");
        fflush(stdout);
        usleep((useconds_t)atoi(hold) * 1000);
    }
    fi_close(&dom->fid);
    fi_close(&fab->fid);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    printf("exit_app: closed\n");
    return 0;
}
