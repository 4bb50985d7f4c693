/* spec_storage: which storage layer a train run's reads go through (spec.h
 * enum spec_storage_layer), from dataset.storage_layer, the profile and the data.
 *
 * Decision: one function decides, from plain values, and both forms of a spec (the parsed
 * struct the worker and the monitor hold, the json a submit checks point by point) go
 * through it, so the daemon that mounts, the submit that refuses and the worker that reads
 * never disagree. Only a file-backed format of an image set is read while training (the
 * native files, synthetic and text are read whole at start or not at all): anything else
 * has no layer. auto mounts when the profile does something to the reads (a cap, or cold
 * mode's page drops): local without cold reads the disk as is. */
#include <string.h>

#include "common/spec.h"
#include "common/vocab.h"

static enum spec_storage_layer spec_storage_resolve(const char *layer, const char *name,
                                                    const char *format, const char *storage,
                                                    const double read[3], bool cold)
{
    const struct vocab_format *f = vocab_format(
        vocab_find(VOCAB_FORMAT, format && format[0] ? format : "native"));
    bool image = name && strcmp(name, "synthetic") != 0 && strcmp(name, "text") != 0;
    if (!image || !f || !vocab_format_converted(f))
        return SPEC_STORAGE_NONE;
    if (layer && strcmp(layer, "in_process") == 0)
        return SPEC_STORAGE_IN_PROCESS;
    if (layer && strcmp(layer, "mount") == 0)
        return SPEC_STORAGE_MOUNT;
    const struct vocab_storage *st = vocab_storage(
        vocab_find(VOCAB_STORAGE, storage && storage[0] ? storage : "local"));
    /* custom's figures are the spec's; a named profile's are vocab_storage_capped's */
    bool capped = st && (st->custom ? read[0] > 0 || read[1] > 0 || read[2] > 0
                                    : vocab_storage_capped(st));
    return capped || cold ? SPEC_STORAGE_MOUNT : SPEC_STORAGE_NONE;
}

enum spec_storage_layer spec_storage_layer_of(const struct spec_dataset *d)
{
    const double read[3] = {d->read_mbps, d->read_latency_ms, d->read_concurrency};
    return spec_storage_resolve(d->storage_layer, d->name, d->format, d->storage, read,
                                d->cold);
}

enum spec_storage_layer spec_storage_layer_json(const json_t *spec)
{
    const double read[3] = {
        json_number_value(spec_field_value(spec, "dataset.read_mbps")),
        json_number_value(spec_field_value(spec, "dataset.read_latency_ms")),
        json_number_value(spec_field_value(spec, "dataset.read_concurrency"))};
    return spec_storage_resolve(
        json_string_value(spec_field_value(spec, "dataset.storage_layer")),
        json_string_value(spec_field_value(spec, "dataset.name")),
        json_string_value(spec_field_value(spec, "dataset.format")),
        json_string_value(spec_field_value(spec, "dataset.storage")), read,
        json_is_true(spec_field_value(spec, "dataset.cold")));
}

const char *spec_storage_layer_name(enum spec_storage_layer l)
{
    return l == SPEC_STORAGE_MOUNT        ? "mount"
           : l == SPEC_STORAGE_IN_PROCESS ? "in_process"
                                          : "none";
}
