// The serial ports a Linux machine has, read from sysfs and /dev alone. node-serialport lists
// ports on Linux by running `udevadm`, which containers and minimal installs lack; the kernel
// says the same in /sys/class/tty: a tty with a `device` link is a port, and a USB one's
// device has idVendor, idProduct, serial and manufacturer files a few directories up.
import fs from "node:fs";
import path from "node:path";
import { SerialPort } from "serialport";

/** What a port list says of a port (node-serialport's list says more; this is what `hil ports` shows). */
export interface PortInfo {
  path: string;
  manufacturer?: string;
  serialNumber?: string;
  vendorId?: string;
  productId?: string;
}

/**
 * node-serialport's list, or, on Linux when that fails (no udevadm), the ports sysfs shows.
 * Throws node-serialport's error elsewhere, and when sysfs cannot be read either.
 */
export async function listSerialPorts(list: () => Promise<PortInfo[]> = () => SerialPort.list()): Promise<PortInfo[]> {
  try {
    return await list();
  } catch (error) {
    if (process.platform !== "linux" || !fs.existsSync("/sys/class/tty")) throw error;
    return listFromSysfs();
  }
}

/** `sys`: the sysfs root; `dev`: where the device files are (tests point both at a tree of their own). */
export function listFromSysfs(roots: { sys?: string; dev?: string } = {}): PortInfo[] {
  const ttyDir = path.join(roots.sys ?? "/sys", "class/tty");
  const dev = roots.dev ?? "/dev";
  return fs
    .readdirSync(ttyDir)
    .sort()
    .flatMap((name): PortInfo[] => {
      const device = path.join(ttyDir, name, "device");
      if (!fs.existsSync(device) || !fs.existsSync(path.join(dev, name))) return [];
      // the 8250 driver registers ttyS0..31 whether or not a UART is there: udev leaves them out too
      if (driverOf(device) === "serial8250") return [];
      const usb = usbAttributes(fs.realpathSync(device));
      return [{ path: path.join(dev, name), ...usb }];
    });
}

function driverOf(device: string): string | undefined {
  try {
    return path.basename(fs.readlinkSync(path.join(device, "driver")));
  } catch {
    return undefined;
  }
}

/** The USB device's ids and strings: the nearest directory up from the tty's device with an idVendor. */
function usbAttributes(device: string): Pick<PortInfo, "vendorId" | "productId" | "serialNumber" | "manufacturer"> {
  for (let dir = device, up = 0; up < 4 && dir !== path.dirname(dir); dir = path.dirname(dir), up++) {
    if (!fs.existsSync(path.join(dir, "idVendor"))) continue;
    const read = (file: string) => {
      try {
        return fs.readFileSync(path.join(dir, file), "utf8").trim() || undefined;
      } catch {
        return undefined;
      }
    };
    return { vendorId: read("idVendor"), productId: read("idProduct"), serialNumber: read("serial"), manufacturer: read("manufacturer") };
  }
  return { vendorId: undefined, productId: undefined, serialNumber: undefined, manufacturer: undefined };
}
