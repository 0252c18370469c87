"""An independent reader and writer of TensorBoard event files, to check track's Go code.

It shares nothing with the Go implementation: CRC-32C is computed bit by bit here, and the
Event and Summary messages are encoded and decoded by the protobuf package from descriptors
built below (field numbers from TensorFlow's event.proto and summary.proto).

    /usr/bin/python3 tfevents.py read FILE     # events as JSON, fails on a bad CRC or length
    /usr/bin/python3 tfevents.py golden        # reference bytes for the Go tests, as JSON
"""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def messages():
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="tfevents_check.proto", package="check", syntax="proto3")
    summary = fd.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".check.Summary.Value")
    event = fd.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".check.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    factory = message_factory.MessageFactory(pool)
    return factory.GetPrototype(pool.FindMessageTypeByName("check.Event"))


def read(path):
    Event = messages()
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(header) != length_crc:
            sys.exit("record at byte %d: bad length CRC" % pos)
        body = data[pos + 12:pos + 12 + length]
        if len(body) != length:
            sys.exit("record at byte %d: truncated" % pos)
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if masked(body) != body_crc:
            sys.exit("record at byte %d: bad data CRC" % pos)
        pos += 16 + length
        ev = Event()
        ev.ParseFromString(body)
        out.append({
            "wall_time": ev.wall_time,
            "step": ev.step,
            "file_version": ev.file_version,
            "values": [[v.tag, v.simple_value] for v in ev.summary.value],
        })
    print(json.dumps(out))


def golden():
    Event = messages()
    ev = Event(wall_time=1700000000.25, step=3)
    v = ev.summary.value.add()
    v.tag, v.simple_value = "loss", 0.5
    v = ev.summary.value.add()
    v.tag, v.simple_value = "lr", 0.001
    body = ev.SerializeToString()
    header = struct.pack("<Q", len(body))
    record = header + struct.pack("<I", masked(header)) + body + struct.pack("<I", masked(body))
    print(json.dumps({
        "crc32c_123456789": "%08x" % crc32c(b"123456789"),
        "masked_123456789": "%08x" % masked(b"123456789"),
        "event": body.hex(),
        "record": record.hex(),
    }, indent=1))


if __name__ == "__main__":
    if sys.argv[1:2] == ["read"] and len(sys.argv) == 3:
        read(sys.argv[2])
    elif sys.argv[1:] == ["golden"]:
        golden()
    else:
        sys.exit(__doc__)
