/* Startup for the sensor hub sample: the vector table, the reset handler that
 * copies .data and clears .bss, and default handlers that park the core. */
#include <stdint.h>

extern uint32_t _data_start, _data_end, _data_load, _bss_start, _bss_end, _stack_top;
extern int main(void);
extern void __libc_init_array(void);

void reset_handler(void);
void systick_handler(void);
void uart_handler(void);

/* newlib's __libc_init_array calls these around the constructors; this
 * application links without crti/crtn, so they are empty here. */
void _init(void) {}
void _fini(void) {}

static void default_handler(void)
{
    for (;;) {
        __asm volatile ("wfi");
    }
}

#define WEAK_ALIAS __attribute__((weak, alias("default_handler")))
void nmi_handler(void) WEAK_ALIAS;
void hard_fault_handler(void) WEAK_ALIAS;
void mem_manage_handler(void) WEAK_ALIAS;
void bus_fault_handler(void) WEAK_ALIAS;
void usage_fault_handler(void) WEAK_ALIAS;
void svc_handler(void) WEAK_ALIAS;
void pendsv_handler(void) WEAK_ALIAS;
void gpio_handler(void) WEAK_ALIAS;
void timer_handler(void) WEAK_ALIAS;
void adc_handler(void) WEAK_ALIAS;

__attribute__((section(".vectors"), used))
static void (*const vectors[16 + 32])(void) = {
    (void (*)(void))(&_stack_top),
    reset_handler,
    nmi_handler,
    hard_fault_handler,
    mem_manage_handler,
    bus_fault_handler,
    usage_fault_handler,
    0, 0, 0, 0,
    svc_handler,
    0, 0,
    pendsv_handler,
    systick_handler,
    /* External interrupts: the ones this board wires, the rest parked. */
    gpio_handler, uart_handler, timer_handler, adc_handler,
    default_handler, default_handler, default_handler, default_handler,
    default_handler, default_handler, default_handler, default_handler,
    default_handler, default_handler, default_handler, default_handler,
    default_handler, default_handler, default_handler, default_handler,
    default_handler, default_handler, default_handler, default_handler,
    default_handler, default_handler, default_handler, default_handler,
    default_handler, default_handler, default_handler, default_handler,
};

void reset_handler(void)
{
    uint32_t *source = &_data_load;
    for (uint32_t *target = &_data_start; target < &_data_end;) {
        *target++ = *source++;
    }
    for (uint32_t *target = &_bss_start; target < &_bss_end;) {
        *target++ = 0;
    }
    /* The FPU: full access for CP10 and CP11 (CPACR). */
    *(volatile uint32_t *)0xE000ED88 |= (0xFu << 20);
    __libc_init_array();
    main();
    for (;;) {
    }
}
