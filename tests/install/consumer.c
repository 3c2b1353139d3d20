/* Links against an installed tilestack and checks header and library agree. */
#include <tilestack/tilestack.h>

#include <stdio.h>

int main(void) {
    printf("tilestack %s, isa %s, e4m3(1.0) = 0x%02x\n", ts_version_string(), ts_isa_name(ts_get_isa()),
           ts_f32_to_e4m3(1.0f));
    return (ts_version_number() == TS_VERSION_NUMBER && ts_f32_to_e4m3(1.0f) == 0x38) ? 0 : 1;
}
