/* The few system calls newlib needs on bare metal: output to the UART's data
 * register, a heap that grows from the end of .bss, and stubs for the rest. */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include "board.h"

extern uint8_t _heap_start;
static uint8_t *heap_end;

void *_sbrk(ptrdiff_t increment)
{
    if (heap_end == 0) {
        heap_end = &_heap_start;
    }
    uint8_t *previous = heap_end;
    uint8_t *stack;
    __asm volatile ("mov %0, sp" : "=r"(stack));
    /* Keep 1 KiB between the heap and the stack. */
    if (heap_end + increment > stack - 1024) {
        errno = ENOMEM;
        return (void *)-1;
    }
    heap_end += increment;
    return previous;
}

int _write(int file, const char *bytes, int length)
{
    (void)file;
    for (int index = 0; index < length; index++) {
        uart_put(bytes[index]);
    }
    return length;
}

int _read(int file, char *bytes, int length)
{
    (void)file;
    int count = 0;
    while (count < length && uart_ready()) {
        bytes[count++] = uart_get();
    }
    return count;
}

int _close(int file) { (void)file; return -1; }
int _fstat(int file, struct stat *status) { (void)file; status->st_mode = S_IFCHR; return 0; }
int _isatty(int file) { (void)file; return 1; }
int _lseek(int file, int offset, int whence) { (void)file; (void)offset; (void)whence; return 0; }
void _exit(int status) { (void)status; for (;;) { } }
int _kill(int pid, int signal) { (void)pid; (void)signal; errno = EINVAL; return -1; }
int _getpid(void) { return 1; }
