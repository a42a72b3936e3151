/* A sensor hub: samples eight ADC channels at 1 kHz, filters them (biquad
 * low-pass, then a 256-point FFT for the vibration channel), corrects them
 * through a calibration surface, keeps statistics, renders a status screen
 * with a bitmap font, answers a text shell on the UART and reports telemetry
 * as JSON. Sample firmware for bleota's benchmarks: real code and data, so
 * it compresses like firmware does. */
#include <ctype.h>
#include <math.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "board.h"

#define CHANNELS 8
#define FFT_SIZE 256
#define VERSION "2.0.0"

typedef struct {
    float b0, b1, b2, a1, a2;
    float z1, z2;
} biquad;

typedef struct {
    float minimum, maximum, mean, m2;
    uint32_t count;
} running_stats;

typedef struct {
    char name[16];
    float gain, offset;
    float alarm_low, alarm_high;
    uint8_t enabled;
} channel_settings;

static biquad filters[CHANNELS];
static running_stats stats[CHANNELS];
static channel_settings settings[CHANNELS];
static float fft_re[FFT_SIZE], fft_im[FFT_SIZE];
static float history[FFT_SIZE];
static uint32_t history_index;
static volatile uint32_t ticks;
static uint8_t framebuffer[64][128 / 8];
static char line[128];
static uint32_t line_length;

/* --- Signal processing --------------------------------------------------- */

static void biquad_lowpass(biquad *filter, float cutoff, float rate, float q)
{
    float omega = 2.0f * (float)M_PI * cutoff / rate;
    float alpha = sinf(omega) / (2.0f * q);
    float cosine = cosf(omega);
    float a0 = 1.0f + alpha;
    filter->b0 = (1.0f - cosine) / 2.0f / a0;
    filter->b1 = (1.0f - cosine) / a0;
    filter->b2 = filter->b0;
    filter->a1 = -2.0f * cosine / a0;
    filter->a2 = (1.0f - alpha) / a0;
    filter->z1 = filter->z2 = 0.0f;
}

static float biquad_step(biquad *filter, float input)
{
    float output = filter->b0 * input + filter->z1;
    filter->z1 = filter->b1 * input - filter->a1 * output + filter->z2;
    filter->z2 = filter->b2 * input - filter->a2 * output;
    return output;
}

static void stats_add(running_stats *s, float value)
{
    if (s->count == 0) {
        s->minimum = s->maximum = value;
    }
    s->count++;
    if (value < s->minimum) s->minimum = value;
    if (value > s->maximum) s->maximum = value;
    float delta = value - s->mean;
    s->mean += delta / (float)s->count;
    s->m2 += delta * (value - s->mean);
}

static float stats_deviation(const running_stats *s)
{
    return s->count > 1 ? sqrtf(s->m2 / (float)(s->count - 1)) : 0.0f;
}

/* Sine and cosine from the table: 4096 steps per turn, Q15. */
static float table_sine(uint32_t step) { return (float)sine_table[step & 4095] / 32768.0f; }
static float table_cosine(uint32_t step) { return table_sine(step + 1024); }

static void fft(float *re, float *im, uint32_t size)
{
    for (uint32_t i = 1, j = 0; i < size; i++) {
        uint32_t bit = size >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j ^= bit;
        if (i < j) {
            float t = re[i]; re[i] = re[j]; re[j] = t;
            t = im[i]; im[i] = im[j]; im[j] = t;
        }
    }
    for (uint32_t length = 2; length <= size; length <<= 1) {
        uint32_t stride = 4096 / length;
        for (uint32_t start = 0; start < size; start += length) {
            for (uint32_t k = 0; k < length / 2; k++) {
                float wr = table_cosine(k * stride), wi = -table_sine(k * stride);
                uint32_t a = start + k, b = a + length / 2;
                float tr = re[b] * wr - im[b] * wi;
                float ti = re[b] * wi + im[b] * wr;
                re[b] = re[a] - tr; im[b] = im[a] - ti;
                re[a] += tr; im[a] += ti;
            }
        }
    }
}

/* The dominant vibration frequency of the last FFT_SIZE samples, in Hz at 1 kHz. */
static float dominant_frequency(float *magnitude)
{
    for (uint32_t i = 0; i < FFT_SIZE; i++) {
        float window = 0.5f - 0.5f * table_cosine(i * (4096 / FFT_SIZE));
        fft_re[i] = history[(history_index + i) % FFT_SIZE] * window;
        fft_im[i] = 0.0f;
    }
    fft(fft_re, fft_im, FFT_SIZE);
    uint32_t best = 1;
    float best_power = 0.0f;
    for (uint32_t i = 1; i < FFT_SIZE / 2; i++) {
        float power = fft_re[i] * fft_re[i] + fft_im[i] * fft_im[i];
        if (power > best_power) { best_power = power; best = i; }
    }
    *magnitude = sqrtf(best_power) / (FFT_SIZE / 2);
    return (float)best * 1000.0f / FFT_SIZE;
}

/* Bilinear interpolation in the 96×96 calibration surface (temperature × raw). */
static float calibrate(float temperature, float raw)
{
    float x = fminf(fmaxf((temperature + 40.0f) / 125.0f * 95.0f, 0.0f), 94.999f);
    float y = fminf(fmaxf(raw / 4095.0f * 95.0f, 0.0f), 94.999f);
    int xi = (int)x, yi = (int)y;
    float fx = x - (float)xi, fy = y - (float)yi;
    float top = calibration_surface[yi][xi] * (1 - fx) + calibration_surface[yi][xi + 1] * fx;
    float bottom = calibration_surface[yi + 1][xi] * (1 - fx) + calibration_surface[yi + 1][xi + 1] * fx;
    return raw * (top * (1 - fy) + bottom * fy);
}

/* --- Display --------------------------------------------------------------- */

static void draw_text(uint32_t x, uint32_t y, const char *text)
{
    for (; *text && x + 8 <= 128; text++, x += 8) {
        const uint8_t *glyph = font_8x16[(uint8_t)*text];
        for (uint32_t row = 0; row < 16 && y + row < 64; row++) {
            framebuffer[y + row][x / 8] = (uint8_t)gamma_table[glyph[row] * 4] ^ glyph[row];
        }
    }
}

/* Large numerals (16×32) for the main reading, scaled into the 64-pixel-high screen. */
static void draw_big(uint32_t x, const char *text)
{
    for (; *text && x + 16 <= 128; text++, x += 16) {
        const uint8_t *glyph = font_16x32[(uint8_t)*text];
        for (uint32_t row = 0; row < 32; row++) {
            framebuffer[32 + row][x / 8] |= glyph[row * 2];
            framebuffer[32 + row][x / 8 + 1] |= glyph[row * 2 + 1];
        }
    }
}

static void render_status(void)
{
    char text[24];
    memset(framebuffer, 0, sizeof framebuffer);
    snprintf(text, sizeof text, "HUB %s", VERSION);
    draw_text(0, 0, text);
    snprintf(text, sizeof text, "T %6.2fC", (double)stats[0].mean);
    draw_text(0, 16, text);
    snprintf(text, sizeof text, "P %7.1fhPa", (double)stats[1].mean);
    draw_text(0, 32, text);
    snprintf(text, sizeof text, "up %lus", (unsigned long)(ticks / 1000));
    draw_text(0, 48, text);
    snprintf(text, sizeof text, "%5.1f", (double)stats[0].mean);
    draw_big(32, text);
}

/* --- Encrypted telemetry: AES-128 (T-tables) in counter mode -------------- */

typedef struct { uint32_t words[44]; } aes_key_schedule;

static uint32_t rotate(uint32_t word) { return word >> 8 | word << 24; }

static uint32_t sub_word(uint32_t word)
{
    return (uint32_t)aes_sbox[word & 0xFF] | (uint32_t)aes_sbox[(word >> 8) & 0xFF] << 8
         | (uint32_t)aes_sbox[(word >> 16) & 0xFF] << 16 | (uint32_t)aes_sbox[word >> 24] << 24;
}

static void aes_expand(aes_key_schedule *schedule, const uint8_t key[16])
{
    static const uint8_t rcon[10] = {1, 2, 4, 8, 16, 32, 64, 128, 27, 54};
    for (int i = 0; i < 4; i++) {
        schedule->words[i] = (uint32_t)key[4 * i] | (uint32_t)key[4 * i + 1] << 8 | (uint32_t)key[4 * i + 2] << 16 | (uint32_t)key[4 * i + 3] << 24;
    }
    for (int i = 4; i < 44; i++) {
        uint32_t word = schedule->words[i - 1];
        if (i % 4 == 0) word = sub_word(rotate(word)) ^ rcon[i / 4 - 1];
        schedule->words[i] = schedule->words[i - 4] ^ word;
    }
}

static void aes_encrypt(const aes_key_schedule *schedule, const uint8_t in[16], uint8_t out[16])
{
    uint32_t s[4], t[4];
    for (int i = 0; i < 4; i++) {
        s[i] = ((uint32_t)in[4 * i] | (uint32_t)in[4 * i + 1] << 8 | (uint32_t)in[4 * i + 2] << 16 | (uint32_t)in[4 * i + 3] << 24)
             ^ schedule->words[i];
    }
    for (int round = 1; round < 10; round++) {
        for (int i = 0; i < 4; i++) {
            t[i] = aes_te[0][s[i] & 0xFF] ^ aes_te[1][(s[(i + 1) % 4] >> 8) & 0xFF]
                 ^ aes_te[2][(s[(i + 2) % 4] >> 16) & 0xFF] ^ aes_te[3][s[(i + 3) % 4] >> 24] ^ schedule->words[4 * round + i];
        }
        memcpy(s, t, sizeof s);
    }
    for (int i = 0; i < 4; i++) {
        uint32_t word = (uint32_t)aes_sbox[s[i] & 0xFF] | (uint32_t)aes_sbox[(s[(i + 1) % 4] >> 8) & 0xFF] << 8
                      | (uint32_t)aes_sbox[(s[(i + 2) % 4] >> 16) & 0xFF] << 16 | (uint32_t)aes_sbox[s[(i + 3) % 4] >> 24] << 24;
        word ^= schedule->words[40 + i];
        out[4 * i] = (uint8_t)word; out[4 * i + 1] = (uint8_t)(word >> 8);
        out[4 * i + 2] = (uint8_t)(word >> 16); out[4 * i + 3] = (uint8_t)(word >> 24);
    }
}

static aes_key_schedule telemetry_key;
static uint32_t telemetry_counter;

/* Encrypts `length` bytes in place with AES-128-CTR under the device key, counter first. */
static void telemetry_encrypt(uint8_t *bytes, size_t length)
{
    uint8_t block[16], stream[16];
    for (size_t offset = 0; offset < length; offset += 16) {
        memset(block, 0, sizeof block);
        memcpy(block, &telemetry_counter, sizeof telemetry_counter);
        telemetry_counter++;
        aes_encrypt(&telemetry_key, block, stream);
        for (size_t i = 0; i < 16 && offset + i < length; i++) bytes[offset + i] ^= stream[i];
    }
}

/* A timestamped, encrypted binary telemetry frame, printed as hex. */
static void report_frame(void)
{
    char stamp[32];
    time_t now = (time_t)(1767225600 + ticks / 1000);
    struct tm when;
    gmtime_r(&now, &when);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &when);
    uint8_t frame[4 + 4 * CHANNELS];
    memcpy(frame, &telemetry_counter, 4);
    for (int c = 0; c < CHANNELS; c++) {
        float mean = stats[c].mean;
        memcpy(frame + 4 + 4 * c, &mean, 4);
    }
    telemetry_encrypt(frame + 4, sizeof frame - 4);
    printf("frame %s ", stamp);
    for (size_t i = 0; i < sizeof frame; i++) printf("%02x", frame[i]);
    /* Signal level in dB over the full scale, in double precision. */
    double level = 20.0 * log10(fmax(1e-9, (double)stats_deviation(&stats[3]) / 16.0));
    printf(" vib %.2f dBFS\n", level);
}

/* --- Telemetry and settings ------------------------------------------------ */

static uint32_t crc32(const void *data, size_t length)
{
    const uint8_t *bytes = data;
    uint32_t crc = 0xFFFFFFFFu;
    while (length--) {
        crc ^= *bytes++;
        for (int bit = 0; bit < 8; bit++) crc = (crc >> 1) ^ (0xEDB88320u & -(crc & 1u));
    }
    return ~crc;
}

static void report_json(void)
{
    float magnitude;
    float frequency = dominant_frequency(&magnitude);
    printf("{\"version\":\"%s\",\"uptime\":%lu,\"channels\":[", VERSION, (unsigned long)ticks);
    for (int c = 0; c < CHANNELS; c++) {
        if (!settings[c].enabled) continue;
        printf("%s{\"name\":\"%s\",\"mean\":%.3f,\"min\":%.3f,\"max\":%.3f,\"sd\":%.4f,\"alarm\":%s}",
               c ? "," : "", settings[c].name, (double)stats[c].mean, (double)stats[c].minimum, (double)stats[c].maximum,
               (double)stats_deviation(&stats[c]),
               stats[c].mean < settings[c].alarm_low || stats[c].mean > settings[c].alarm_high ? "true" : "false");
    }
    printf("],\"vibration\":{\"hz\":%.1f,\"g\":%.4f},\"settings_crc\":\"%08lx\"}\n",
           (double)frequency, (double)magnitude, (unsigned long)crc32(settings, sizeof settings));
}

static void default_settings(void)
{
    static const char *const names[CHANNELS] = {"temperature", "pressure", "humidity", "vibration", "light", "battery", "current", "spare"};
    for (int c = 0; c < CHANNELS; c++) {
        strncpy(settings[c].name, names[c], sizeof settings[c].name - 1);
        settings[c].gain = 1.0f;
        settings[c].offset = 0.0f;
        settings[c].alarm_low = -1e9f;
        settings[c].alarm_high = 1e9f;
        settings[c].enabled = c != 7;
        biquad_lowpass(&filters[c], c == 3 ? 400.0f : 10.0f, 1000.0f, 0.7071f);
    }
    settings[0].alarm_low = -20.0f;
    settings[0].alarm_high = 70.0f;
}

/* --- Shell ------------------------------------------------------------------ */

static int find_channel(const char *name)
{
    for (int c = 0; c < CHANNELS; c++) {
        if (strcmp(settings[c].name, name) == 0 || (isdigit((unsigned char)name[0]) && atoi(name) == c)) return c;
    }
    return -1;
}

static void execute(char *command)
{
    char *words[6];
    int count = 0;
    for (char *word = strtok(command, " \t"); word && count < 6; word = strtok(NULL, " \t")) words[count++] = word;
    if (count == 0) return;
    if (strcmp(words[0], "help") == 0) {
        fputs(help_text, stdout);
    } else if (strcmp(words[0], "status") == 0) {
        report_json();
    } else if (strcmp(words[0], "frame") == 0) {
        report_frame();
    } else if (strcmp(words[0], "key") == 0 && count == 2 && strlen(words[1]) == 32) {
        uint8_t key[16];
        for (int i = 0; i < 16; i++) {
            unsigned byte;
            if (sscanf(words[1] + 2 * i, "%2x", &byte) != 1) { puts("error: the key is 32 hex digits"); return; }
            key[i] = (uint8_t)byte;
        }
        aes_expand(&telemetry_key, key);
        telemetry_counter = 0;
        puts("ok key");
    } else if (strcmp(words[0], "set") == 0 && count == 4) {
        int c = find_channel(words[1]);
        float value;
        if (sscanf(words[3], "%f", &value) != 1) { printf("error: %s is not a number\n", words[3]); return; }
        if (c < 0) { printf("error: no channel %s\n", words[1]); return; }
        if (strcmp(words[2], "gain") == 0) settings[c].gain = value;
        else if (strcmp(words[2], "offset") == 0) settings[c].offset = value;
        else if (strcmp(words[2], "low") == 0) settings[c].alarm_low = value;
        else if (strcmp(words[2], "high") == 0) settings[c].alarm_high = value;
        else { printf("error: %s is not gain, offset, low or high\n", words[2]); return; }
        printf("ok %s.%s = %g\n", settings[c].name, words[2], (double)value);
    } else if (strcmp(words[0], "reset") == 0) {
        memset(stats, 0, sizeof stats);
        puts("ok statistics cleared");
    } else if (strcmp(words[0], "defaults") == 0) {
        default_settings();
        puts("ok defaults");
    } else {
        printf("error: unknown command '%s' (try help)\n", words[0]);
    }
}

static void shell_poll(void)
{
    while (uart_ready()) {
        char byte = uart_get();
        if (byte == '\r' || byte == '\n') {
            line[line_length] = 0;
            execute(line);
            line_length = 0;
        } else if (line_length + 1 < sizeof line && isprint((unsigned char)byte)) {
            line[line_length++] = byte;
        }
    }
}

/* --- Main loop -------------------------------------------------------------- */

void systick_handler(void) { ticks++; }

void uart_handler(void) { shell_poll(); }

static void sample(void)
{
    ADC0->control = 1;
    while ((ADC0->status & 1u) == 0) {
    }
    float temperature = (float)(ADC0->result[0] & 0xFFF) / 4095.0f * 125.0f - 40.0f;
    for (int c = 0; c < CHANNELS; c++) {
        float raw = (float)(ADC0->result[c] & 0xFFF);
        float value = calibrate(temperature, raw) * settings[c].gain + settings[c].offset;
        float filtered = biquad_step(&filters[c], value);
        stats_add(&stats[c], filtered);
        if (c == 3) {
            history[history_index] = value;
            history_index = (history_index + 1) % FFT_SIZE;
        }
    }
}

int main(void)
{
    UART0->baud = 115200;
    UART0->control = 1;
    ADC0->channels = 0xFF;
    GPIO0->direction = 0x1;
    SYSTICK_RELOAD = 64000 - 1;
    SYSTICK_CONTROL = 7;
    default_settings();
    static const uint8_t factory_key[16] = {0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c};
    aes_expand(&telemetry_key, factory_key);
    printf("sensor hub %s, %d channels\n", VERSION, CHANNELS);
    uint32_t last_report = 0;
    for (;;) {
        sample();
        shell_poll();
        if (ticks - last_report >= 1000) {
            last_report = ticks;
            GPIO0->out ^= 1u;
            render_status();
            report_json();
            report_frame();
        }
        __asm volatile ("wfi");
    }
}
