//! A device-free CubeCL runtime: enough of a `Runtime` for a kernel's `define()` (which reads the
//! client's device properties), so that kernels compile to CUDA C++ or WGSL text with no GPU, no
//! CUDA toolkit and no wgpu adapter: for snapshots and for reviewing generated code anywhere.
//! Every I/O entry point is unreachable (`unimplemented!`): nothing runs here.
//!
//! The device properties are pinned (not read from a machine), so the text is the same
//! everywhere: CUDA as CubeCL's CUDA runtime compiles for an sm_70+ GPU (fast math, grid
//! constants), WGSL with the types every adapter has (no f16, no 64-bit).

use std::{marker::PhantomData, sync::Arc};

use cubecl::prelude::*;
use cubecl::{
    Compiler, CubeTask,
    device::{Device, DeviceId, DeviceService, ServerUtilitiesHandle},
    ir::{
        DeviceProperties, HardwareProperties, MemoryDeviceProperties, TargetProperties, VectorSize,
    },
    profile::{ProfileDuration, TimingMethod},
    server::{
        Binding, ComputeServer, CopyDescriptor, KernelArguments, ProfileError, ProfilingToken,
        ServerCommunication, ServerError, ServerUtilities,
    },
    stream_id::StreamId,
    zspace::{Shape, Strides},
};
use cubecl_runtime::{
    allocator::ContiguousMemoryLayoutPolicy,
    logging::ServerLogger,
    memory_management::{ManagedMemoryHandle, MemoryAllocationMode, MemoryUsage},
    storage::{BytesResource, BytesStorage, ManagedResource},
};

pub trait Flavor: core::fmt::Debug + Clone + Send + Sync + 'static {
    type Compiler: Compiler;
    fn device_properties() -> DeviceProperties;
    fn target_properties() -> TargetProperties;
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct StubDevice;
impl Device for StubDevice {
    fn from_id(_: DeviceId) -> Self {
        Self
    }
    fn to_id(&self) -> DeviceId {
        DeviceId {
            type_id: 0,
            index_id: 0,
        }
    }
}

pub struct StubServer<F: Flavor> {
    utilities: Arc<ServerUtilities<Self>>,
    _f: PhantomData<F>,
}
impl<F: Flavor> core::fmt::Debug for StubServer<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("StubServer")
    }
}
impl<F: Flavor> ServerCommunication for StubServer<F> {
    const SERVER_COMM_ENABLED: bool = false;
}
impl<F: Flavor> DeviceService for StubServer<F> {
    fn init(_: DeviceId) -> Self {
        let utilities = Arc::new(ServerUtilities::new(
            F::device_properties(),
            Arc::new(ServerLogger::default()),
            (),
            ContiguousMemoryLayoutPolicy::new(32),
        ));
        Self {
            utilities,
            _f: PhantomData,
        }
    }
    fn utilities(&self) -> ServerUtilitiesHandle {
        self.utilities.clone() as ServerUtilitiesHandle
    }
}
impl<F: Flavor> ComputeServer for StubServer<F> {
    type Kernel = Box<dyn CubeTask<F::Compiler>>;
    type Info = ();
    type MemoryLayoutPolicy = ContiguousMemoryLayoutPolicy;
    type Storage = BytesStorage;
    fn initialize_memory(&mut self, _: ManagedMemoryHandle, _: u64, _: StreamId) {
        unimplemented!("offline")
    }
    fn logger(&self) -> Arc<ServerLogger> {
        self.utilities.logger.clone()
    }
    fn utilities(&self) -> Arc<ServerUtilities<Self>> {
        self.utilities.clone()
    }
    fn read(
        &mut self,
        _: Vec<CopyDescriptor>,
        _: StreamId,
    ) -> cubecl::future::DynFut<Result<Vec<cubecl::bytes::Bytes>, ServerError>> {
        unimplemented!("offline")
    }
    fn write(&mut self, _: Vec<(CopyDescriptor, cubecl::bytes::Bytes)>, _: StreamId) {
        unimplemented!("offline")
    }
    fn sync(&mut self, _: StreamId) -> cubecl::future::DynFut<Result<(), ServerError>> {
        Box::pin(async { Ok(()) })
    }
    fn get_resource(
        &mut self,
        _: Binding,
        _: StreamId,
    ) -> Result<ManagedResource<BytesResource>, ServerError> {
        unimplemented!("offline")
    }
    unsafe fn launch(
        &mut self,
        _: Self::Kernel,
        _: CubeCount,
        _: KernelArguments,
        _: ExecutionMode,
        _: StreamId,
    ) {
        unimplemented!("offline")
    }
    fn flush(&mut self, _: StreamId) -> Result<(), ServerError> {
        Ok(())
    }
    fn memory_usage(&mut self, _: StreamId) -> Result<MemoryUsage, ServerError> {
        unimplemented!("offline")
    }
    fn memory_cleanup(&mut self, _: StreamId) {}
    fn start_profile(&mut self, _: StreamId) -> Result<ProfilingToken, ServerError> {
        unimplemented!("offline")
    }
    fn end_profile(
        &mut self,
        _: StreamId,
        _: ProfilingToken,
    ) -> Result<ProfileDuration, ProfileError> {
        unimplemented!("offline")
    }
    fn allocation_mode(&mut self, _: MemoryAllocationMode, _: StreamId) {}
}

#[derive(Debug, Clone)]
pub struct OfflineRuntime<F: Flavor>(PhantomData<F>);
impl<F: Flavor> Runtime for OfflineRuntime<F> {
    type Compiler = F::Compiler;
    type Server = StubServer<F>;
    type Device = StubDevice;
    fn client(device: &Self::Device) -> ComputeClient<Self> {
        ComputeClient::load(device)
    }
    fn name(_: &ComputeClient<Self>) -> &'static str {
        "offline"
    }
    fn max_cube_count() -> (u32, u32, u32) {
        (u16::MAX as u32, u16::MAX as u32, u16::MAX as u32)
    }
    fn can_read_tensor(_: &Shape, _: &Strides) -> bool {
        true
    }
    fn target_properties() -> TargetProperties {
        F::target_properties()
    }
    fn enumerate_devices(_: u16, _: &()) -> Vec<DeviceId> {
        vec![DeviceId {
            type_id: 0,
            index_id: 0,
        }]
    }
}

fn hardware(plane: u32, max_vector_size: VectorSize) -> HardwareProperties {
    HardwareProperties {
        load_width: 128,
        plane_size_min: plane,
        plane_size_max: plane,
        max_bindings: 32,
        max_shared_memory_size: 48 * 1024,
        max_cube_count: (u16::MAX as u32, u16::MAX as u32, u16::MAX as u32),
        max_units_per_cube: 1024,
        max_cube_dim: (1024, 1024, 64),
        num_streaming_multiprocessors: None,
        num_tensor_cores: None,
        min_tensor_cores_dim: None,
        num_cpu_cores: None,
        max_vector_size,
    }
}

pub type CudaCompiler = cubecl_cpp::shared::CppCompiler<
    cubecl_cpp::cuda::CudaDialect<cubecl_cpp::cuda::mma::CudaWmmaCompiler>,
>;

#[derive(Debug, Clone)]
pub struct CudaFlavor;
impl Flavor for CudaFlavor {
    type Compiler = CudaCompiler;
    fn device_properties() -> DeviceProperties {
        let mut p = DeviceProperties::new(
            Default::default(),
            MemoryDeviceProperties {
                max_page_size: 1 << 30,
                alignment: 512,
            },
            hardware(32, VectorSize::MAX),
            TimingMethod::System,
        );
        cubecl_cpp::register_supported_types(&mut p);
        // As cubecl-cuda registers them on every device: warp operations (row reductions use
        // them).
        p.features.plane.insert(cubecl::ir::features::Plane::Ops);
        p.features
            .plane
            .insert(cubecl::ir::features::Plane::NonUniformControlFlow);
        p
    }
    fn target_properties() -> TargetProperties {
        // Same as cubecl_cuda::CudaRuntime::target_properties() except contiguous_elements (mma only).
        TargetProperties {
            mma: Default::default(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct WgslFlavor;
impl Flavor for WgslFlavor {
    type Compiler = cubecl_wgpu::WgslCompiler;
    fn device_properties() -> DeviceProperties {
        use cubecl::ir::{
            AddressType, ElemType, FloatKind, IntKind, UIntKind, features::TypeUsage,
        };
        let mut p = DeviceProperties::new(
            Default::default(),
            MemoryDeviceProperties {
                max_page_size: 1 << 27,
                alignment: 256,
            },
            hardware(32, 4),
            TimingMethod::System,
        );
        // mirrors cubecl-wgpu backend/wgsl.rs register_types (no optional adapter features)
        p.register_address_type(AddressType::U32);
        for ty in [
            ElemType::UInt(UIntKind::U32),
            ElemType::Int(IntKind::I32),
            ElemType::Float(FloatKind::F32),
            ElemType::Float(FloatKind::Flex32),
            ElemType::Bool,
        ] {
            p.register_type_usage(ty, TypeUsage::all());
        }
        p
    }
    fn target_properties() -> TargetProperties {
        TargetProperties {
            mma: Default::default(),
        }
    }
}
