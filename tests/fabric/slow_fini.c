/* An EAL plugin (DROCE_EAL="-d slow_fini.so") that does nothing but take 50 ms in its
 * destructor: it runs at process exit after libfabric's, which dlclose()s the providers, so
 * threads of an unloaded provider would run into unmapped code meanwhile (tests/fabric.rs).
 * Build: cc -shared -fPIC slow_fini.c -o slow_fini.so */
#include <unistd.h>

__attribute__((destructor)) static void slow_fini(void)
{
    usleep(50000);
}
